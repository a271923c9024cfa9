#pragma once
// What the subcommands share: the model flags, the text, batches, and a training run that
// measures itself (trace, compile and step time, peak memory, losses).
#include <lazytrace/lazytrace.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "flags.h"

namespace cli {

inline const char* kDefaultText = "/usr/share/common-licenses/GPL-3";

/** The model and data flags train, compare and report share. */
void add_model_flags(Flags& f, int64_t steps, int64_t layers, bool layers_mode = true);
/** The decoder those flags describe (vocab 256: bytes) for a --layers-mode (scan keeps
 * the layers' weights stacked). */
lt::nn::DecoderConfig model_config(const Flags& f, const std::string& mode);
/** --layers-mode as the library's mode. */
lt::nn::LayersMode layers_mode(const std::string& mode);

/** The bytes of a text file; a UsageError if it cannot be read or is too short. */
std::string read_text(const std::string& path, int64_t seq);
/** The steps a checkpoint (train --checkpoint) has done, from its metadata; a UsageError
 * naming `path` where it is not a checkpoint. */
int64_t checkpoint_steps(const std::map<std::string, std::string>& metadata,
                         const std::string& path);
/** The model's weights in a file saved by train: a checkpoint's without AdamW's state. */
lt::nn::ParamMap weights_in(const lt::nn::ParamMap& file);

/** A UsageError naming `flag` unless a file can be written at `path` (its directory exists
 * and is writable, and it is not a directory itself). */
void check_writable(const std::string& path, const char* flag);
/** Whether two paths name the same file (existing or not). */
bool same_file(const std::string& a, const std::string& b);

/** The config as safetensors metadata, and back (UsageError naming a bad field). Files hold
 * per-layer weights (nn::per_layer_parameters), so every --layers-mode reads every file. */
std::map<std::string, std::string> config_metadata(const lt::nn::DecoderConfig& c);
lt::nn::DecoderConfig config_from_metadata(const std::map<std::string, std::string>& m,
                                           const std::string& path);

struct RunOptions {
  lt::nn::DecoderConfig config;
  std::string mode = "loop";  // loop, assume-pure, scan
  lt::Remat remat = lt::Remat::save;
  int64_t steps = 100, batch = 8, seq = 64;
  double lr = 3e-3;
  int64_t warmup_steps = 0;   // the rate rises linearly over these first steps
  bool cosine = false;        // then decays as a cosine towards 0 by the last step
  double clip_grad_norm = 0;  // the gradients' norm clipped to this (0: not clipped)
  bool autocast = false;      // the forward's products in bfloat16 (lt::AutocastGuard)
  uint64_t seed = 0;
  std::string init;  // weights to start from
  // A training checkpoint (weights, AdamW's state, the steps done) to continue from, and the
  // file to write one to every `checkpoint_every` steps (0: after the last step only).
  std::string resume, checkpoint;
  int64_t checkpoint_every = 0;
  // Data parallelism over the ranks of lt::dist (mpirun): `batch` is the global batch, of
  // which each rank runs its slice; gradients are all-reduced in buckets of this size.
  int64_t bucket_bytes = int64_t{4} << 20;
  bool shard_optimizer = false;  // ZeRO-1: each rank's AdamW on its shard of the buckets
  // the dtype of the gradients' collectives (--reduce-dtype; unset: the gradients' own)
  std::optional<lt::DType> reduce_dtype = std::nullopt;
};

struct RunResult {
  std::vector<float> losses;
  double trace_ms_per_step = 0;  // steady steps (after the first)
  double compile_ms = 0;         // all steps (the first compiles)
  double step_ms = 0;            // steady steps, wall
  double first_step_ms = 0;
  double peak_mb = 0;
  double tokens_per_s = 0;  // the global batch's, over every rank
  int ranks = 1;
  double collective_ms_per_step = 0;       // steady steps: inside all-reduces (waits included)
  double collective_wait_ms_per_step = 0;  // of those, the step's thread waited (not overlapped)
  double collective_mb_per_step = 0;       // bytes each rank all-reduces per step
  std::shared_ptr<lt::nn::DecoderLM> model;
};

/** Called after each step with its 1-based number, the loss and the seconds so far. */
using StepFn = std::function<void(int64_t step, float loss, double seconds)>;

/** The learning rate of step 1, 2, ...: o.lr after the warmup, or its cosine decay. */
double learning_rate(const RunOptions& o, int64_t step);
/** Trains the decoder with AdamW on random windows of `text`, measuring as it goes; data
 * parallel over the ranks of lt::dist when there are several (each draws the same global
 * batch and runs its rows). */
RunResult train_run(const RunOptions& o, const std::string& text, const StepFn& on_step);

/** A progress line: a bar with step, loss, tokens/s and ETA on a terminal, plain lines
 * every `every` steps otherwise. */
class Progress {
 public:
  /** `first`: the run's first step (after the steps a resumed checkpoint did). */
  Progress(int64_t total, int64_t tokens_per_step, int64_t every, int64_t first = 1);
  void update(int64_t step, float loss, double seconds);
  void done();

 private:
  int64_t total_, tokens_, every_, first_;
  bool tty_;
};

}  // namespace cli
