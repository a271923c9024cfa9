#pragma once
/**
 * Data parallelism for a module, like PyTorch's DistributedDataParallel: every rank holds
 * the whole model, runs the step on its slice of the global batch (lt::dist::shard), and
 * the ranks' gradients are averaged with all-reduces before the optimizer step:
 *
 *   lt::dist::init();                      // under mpirun: MPI; else one process
 *   lt::dist::DataParallel dp(*model);     // rank 0's initial weights on every rank
 *   lt::optim::AdamW opt(dp.parameters());
 *   auto step = lt::compile([&](const lt::Tensor& x, const lt::Tensor& y) {
 *     lt::Tensor loss = lt::nn::cross_entropy((*model)(x), y);
 *     loss.backward();
 *     dp.reduce_gradients();               // recorded into the step: one graph
 *     opt.step();
 *     dp.gather_parameters();              // ZeRO-1 only; otherwise nothing
 *     opt.zero_grad();
 *     return dp.average(loss);
 *   });
 *
 * With shard_optimizer (ZeRO-1), parameters() are this rank's shards of the buckets: the
 * gradients are reduce-scattered onto them, the optimizer updates (and keeps state for)
 * 1/N of the elements on each rank, and gather_parameters() all-gathers the result into the
 * module's parameters. The shards take the parameters' values at each reduce_gradients(),
 * so weights loaded into the module (or broadcast) after this is made are what the step
 * updates. The optimizer must update elementwise (SGD, AdamW). A parameter without a
 * gradient gets a zero one there (AdamW still decays it and moves its moments), where the
 * replicated optimizer skips it; a frozen parameter (requires_grad false) is left out, as is
 * the second name of a tied one.
 */
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lazytrace/nn/module.h"
#include "lazytrace/optim/optim.h"

namespace lazytrace::dist {

struct DataParallelOptions {
  /** Gradients all-reduced together, in reverse parameter order (the order backward makes
   * them), up to this many bytes per all-reduce (a larger parameter alone). 4 MiB: on a CPU,
   * buckets that stay in the caches reduce faster than PyTorch DDP's 25 MiB (docs/benchmarks.md,
   * bench-dist). */
  int64_t bucket_bytes = int64_t{4} << 20;
  /** Gradients averaged over the ranks (the 1/N scale folded into the reduction), so a step
   * on N ranks is the step on their N batches together; false: summed. */
  bool average = true;
  /** Broadcast rank 0's parameters and buffers when made, so every rank starts equal. */
  bool broadcast_parameters = true;
  /** ZeRO-1: each rank's optimizer updates its 1/N shard of every bucket (see above). */
  bool shard_optimizer = false;
  /**
   * The dtype the gradients are reduced in, cast to it before their collectives and back
   * after, as PyTorch FSDP's MixedPrecision(reduce_dtype=...) and DDP's bf16_compress_hook
   * do: with bfloat16 (or float16) lt::dist's exchange moves half the bytes of float32
   * gradients, at the cost of rounding each rank's gradient and their mean to its 8 (11)
   * bits (the sum itself is taken in float32, rounded once; one rank rounds alike). Not
   * with LAZYTRACE_MPI_ALL_REDUCE=mpi, which sums in float32 on the wire; with ZeRO-1 only
   * the reduce-scatter's bytes, not the parameters' all-gather; bucket_bytes counts the
   * gradients' own dtype. Each gradient is cast as it is copied into its bucket, and back as
   * it is copied out; where collectives overlap, a stacked model's buckets still start
   * inside its backward loop (overlap_collectives): an all-reduce's part casts each layer's
   * slice as it starts, ZeRO-1's reduce-scatter its slices once the last is made. A floating dtype;
   * unset: each gradient's own.
   */
  std::optional<DType> reduce_dtype = std::nullopt;
};

class DataParallel {
 public:
  explicit DataParallel(nn::Module& module, DataParallelOptions options = {});

  /** Every rank's parameters and buffers become rank 0's (recorded; runs at the next sync). */
  void broadcast_parameters();
  /** What the optimizer updates: the module's parameters, or (ZeRO-1) this rank's shards. */
  std::vector<Tensor> parameters() const;
  /**
   * After backward: each parameter's grad() becomes the mean (or sum) over the ranks,
   * recorded lazily, so inside lt::compile the collectives are part of the step's graph.
   * Parameters without a gradient are skipped (every rank must agree on which). ZeRO-1:
   * the shards' grad() become their part of it, and the parameters' gradients are dropped.
   */
  void reduce_gradients();
  void all_reduce_gradients() { reduce_gradients(); }
  /** ZeRO-1: after the optimizer step, every rank's updated shards into the parameters. */
  void gather_parameters();
  /**
   * After reduce_gradients(): lt::nn::clip_grad_norm_ over the gradients the optimizer
   * reads. With ZeRO-1 each rank holds a part of them, so the parts' norms are all-reduced
   * into the global one; every rank returns it and clips by it.
   */
  Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0);
  /** The mean over ranks of a value (e.g. the loss, for the log): all_reduce(t, "mean"). */
  Tensor average(const Tensor& t) const;

  /** An optimizer's state per module parameter, keyed by the parameter's name. */
  using OptimizerState = std::map<std::string, optim::Optimizer::State>;
  /**
   * The state of `opt` (an optimizer over parameters()) per module parameter, whole, like
   * PyTorch FSDP's optim_state_dict: with ZeRO-1 each rank holds its shards' part, so this
   * all-gathers it (a collective, run before it returns: every rank calls it, and every rank
   * gets it all). Saved,
   * it resumes on any number of ranks, sharded or not, and in one process.
   */
  OptimizerState optimizer_state(const optim::Optimizer& opt) const;
  /**
   * Loads whole per-parameter state (optimizer_state()'s, or a one-process optimizer's
   * state() named by parameter) into `opt`, an optimizer over parameters(): with ZeRO-1,
   * this rank's part of each shard. No communication.
   */
  void load_optimizer_state(optim::Optimizer& opt, const OptimizerState& state) const;

  /** The buckets of the last all_reduce_gradients, as parameter names, in the order run. */
  const std::vector<std::vector<std::string>>& buckets() const { return buckets_; }
  nn::Module& module() { return module_; }

 private:
  // ZeRO-1: one of the all-reduce's buckets (a parameter of bucket_bytes or more alone), its
  // parameters flattened one after another, padded to a multiple of the ranks
  struct Shard {
    std::vector<std::string> names;
    std::vector<Tensor> params;
    int64_t numel = 0, padded = 0;
    int64_t begin = 0;  // rank * padded / N
    Tensor shard;       // this rank's [begin, begin + padded / N), from the parameters each step
  };
  void make_shards();
  // the index into shards_ (ZeRO-1) or the module parameter's name of each of opt's params
  std::vector<size_t> shard_of_each(const optim::Optimizer& opt, const char* what) const;
  std::vector<std::string> name_of_each(const optim::Optimizer& opt, const char* what) const;

  nn::Module& module_;
  DataParallelOptions options_;
  std::vector<std::vector<std::string>> buckets_;
  std::vector<Shard> shards_;
};

}  // namespace lazytrace::dist
