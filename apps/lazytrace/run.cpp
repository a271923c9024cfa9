#include "run.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numbers>
#include <optional>

namespace cli {

namespace nn = lt::nn;

void add_model_flags(Flags& f, int64_t steps, int64_t layers, bool layers_mode) {
  f.add("text", kDefaultText, "text file to train on (bytes are tokens)");
  f.add("hidden", "128", "model width");
  f.add("intermediate", "512", "MLP width");
  f.add("heads", "4", "attention heads");
  f.add("kv-heads", "2", "key/value heads (grouped-query attention)");
  f.add("layers", std::to_string(layers), "decoder layers");
  f.add("steps", std::to_string(steps), "training steps");
  f.add("batch", "8", "sequences per step");
  f.add("seq", "64", "tokens per sequence");
  f.add("lr", "0.003", "AdamW learning rate");
  f.add("seed", "0", "random seed (weights and batches)");
  if (layers_mode) f.add("layers-mode", "scan", "how layers run: loop, assume-pure or scan");
  f.add("remat", "save", "scan's backward: save residuals or recompute the layer");
}

nn::DecoderConfig model_config(const Flags& f, const std::string& mode) {
  nn::DecoderConfig c;
  c.vocab = 256;
  c.hidden = f.integer("hidden", 1);
  c.intermediate = f.integer("intermediate", 1);
  c.heads = f.integer("heads", 1);
  c.kv_heads = f.integer("kv-heads", 1);
  c.layers = f.integer("layers", 1);
  c.max_seq = f.integer("seq", 2);
  c.stacked_layers = mode == "scan";
  try {
    c.validate();
  } catch (const lt::Error& e) {
    throw UsageError(e.what());
  }
  return c;
}

nn::LayersMode layers_mode(const std::string& mode) {
  if (mode == "loop") return nn::LayersMode::loop;
  if (mode == "assume-pure") return nn::LayersMode::assume_pure;
  return nn::LayersMode::scan;
}

std::string read_text(const std::string& path, int64_t seq) {
  std::error_code ec;
  std::ifstream in(path, std::ios::binary);
  if (!in || !std::filesystem::is_regular_file(path, ec))
    throw UsageError(cat("cannot read the text file '", path, "'; pass --text FILE"));
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (static_cast<int64_t>(s.size()) < seq + 2)
    throw UsageError(cat("the text file '", path, "' has ", std::to_string(s.size()),
                         " bytes; it needs more than --seq + 1 = ", std::to_string(seq + 1)));
  return s;
}

void check_writable(const std::string& path, const char* flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (path.empty() || !p.has_filename() || fs::is_directory(p, ec))
    throw UsageError(cat(flag, " '", path, "' names no file; give a file name"));
  if (!fs::is_directory(dir, ec))
    throw UsageError(cat(flag, " '", path, "': '", dir.string(),
                         fs::exists(dir, ec) ? "' is not a directory" : "' does not exist"));
  if (::access(dir.c_str(), W_OK) != 0)
    throw UsageError(
        cat(flag, " '", path, "': the directory '", dir.string(), "' is not writable"));
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec1, ec2;
  const auto ca = std::filesystem::weakly_canonical(a, ec1);
  const auto cb = std::filesystem::weakly_canonical(b, ec2);
  return !ec1 && !ec2 ? ca == cb : a == b;
}

// a double as text that reads back as the same double (as Python's repr)
std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::map<std::string, std::string> config_metadata(const nn::DecoderConfig& c) {
  return {{"format", "lazytrace-decoder"},      {"vocab", std::to_string(c.vocab)},
          {"hidden", std::to_string(c.hidden)}, {"intermediate", std::to_string(c.intermediate)},
          {"heads", std::to_string(c.heads)},   {"kv_heads", std::to_string(c.kv_heads)},
          {"layers", std::to_string(c.layers)}, {"max_seq", std::to_string(c.max_seq)},
          {"rope_theta", exact(c.rope_theta)},  {"norm_eps", exact(c.norm_eps)}};
}

nn::DecoderConfig config_from_metadata(const std::map<std::string, std::string>& m,
                                       const std::string& path) {
  auto field = [&](const char* k) -> int64_t {
    auto it = m.find(k);
    if (it == m.end())
      throw UsageError(cat("'", path, "' has no '", k,
                           "' in its metadata: it was not saved by lazytrace train"));
    try {
      return std::stoll(it->second);
    } catch (const std::exception&) {
      throw UsageError(cat("'", path, "' has a bad '", k, "' in its metadata: ", it->second));
    }
  };
  nn::DecoderConfig c;
  c.vocab = field("vocab");
  c.hidden = field("hidden");
  c.intermediate = field("intermediate");
  c.heads = field("heads");
  c.kv_heads = field("kv_heads");
  c.layers = field("layers");
  c.max_seq = field("max_seq");
  // absent from files of earlier versions: the defaults
  for (auto [k, v] : {std::pair{"rope_theta", &c.rope_theta}, std::pair{"norm_eps", &c.norm_eps}}) {
    auto it = m.find(k);
    if (it == m.end()) continue;
    try {
      size_t used = 0;
      *v = std::stod(it->second, &used);
      if (used != it->second.size() || !(std::isfinite(*v) && *v > 0))  // a log, a division
        throw std::invalid_argument(k);
    } catch (const std::exception&) {
      throw UsageError(cat("'", path, "' has a bad '", k, "' in its metadata: ", it->second));
    }
  }
  return c;
}

namespace {
// A checkpoint's tensors beside the weights: "optimizer.<parameter>.<state>" (AdamW's
// exp_avg, exp_avg_sq and step), the parameters named as the model holds them (stacked in
// the scan mode), so a checkpoint resumes in the --layers-mode that wrote it.
constexpr const char* kOptimizer = "optimizer.";

using OptimizerState = lt::dist::DataParallel::OptimizerState;

// Every rank calls it (with ZeRO-1 the state is gathered from the ranks' shards); rank 0
// writes the file.
void save_checkpoint(const RunOptions& o, const nn::DecoderLM& model, const lt::optim::AdamW& opt,
                     const lt::dist::DataParallel* dp, int64_t steps) {
  OptimizerState state;
  if (dp) {
    state = dp->optimizer_state(opt);
  } else {
    const std::vector<std::string> names = model.named_parameters().keys();
    const std::vector<lt::optim::Optimizer::State> each = opt.state();
    for (size_t i = 0; i < names.size(); ++i) state[names[i]] = each[i];
  }
  nn::ParamMap out = nn::per_layer_parameters(model);
  for (const auto& [name, entries] : state)
    for (const auto& [k, t] : entries) out.insert(cat(kOptimizer, name, ".", k), t);
  lt::sync(out.values());  // on every rank: the same collectives
  if (lt::dist::rank() != 0) return;
  std::map<std::string, std::string> meta = config_metadata(o.config);
  meta["steps_done"] = std::to_string(steps);
  meta["layers_mode"] = o.mode;
  nn::save_file(out, o.checkpoint, meta);
}

// AdamW's state in a checkpoint, by parameter name.
OptimizerState checkpoint_state(const nn::ParamMap& file, const nn::DecoderLM& model,
                                const std::string& path) {
  OptimizerState state;
  for (const std::string& name : model.named_parameters().keys())
    for (const char* k : {"step", "exp_avg", "exp_avg_sq"}) {
      const lt::Tensor* t = file.find(cat(kOptimizer, name, ".", k));
      if (!t)
        throw UsageError(cat("'", path, "' has no optimizer state '", kOptimizer, name, ".", k,
                             "': it is not a checkpoint of this model"));
      state[name][k] = *t;
    }
  return state;
}
}  // namespace

int64_t checkpoint_steps(const std::map<std::string, std::string>& m, const std::string& path) {
  auto it = m.find("steps_done");
  if (it == m.end())
    throw UsageError(cat("'", path,
                         "' is not a training checkpoint (no 'steps_done' in its metadata): "
                         "write one with train --checkpoint, or start from weights with --init"));
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    throw UsageError(cat("'", path, "' has a bad 'steps_done' in its metadata: ", it->second));
  }
}

nn::ParamMap weights_in(const nn::ParamMap& file) {
  nn::ParamMap w;
  for (const auto& [name, t] : file)
    if (name.rfind(kOptimizer, 0) != 0) w.insert(name, t);
  return w;
}

double learning_rate(const RunOptions& o, int64_t step) {
  if (step <= o.warmup_steps)
    return o.lr * static_cast<double>(step) / static_cast<double>(o.warmup_steps);
  if (!o.cosine) return o.lr;
  const double done = static_cast<double>(step - o.warmup_steps - 1) /
                      static_cast<double>(std::max<int64_t>(o.steps - o.warmup_steps, 1));
  return o.lr * 0.5 * (1 + std::cos(std::numbers::pi * done));
}

RunResult train_run(const RunOptions& o, const std::string& text, const StepFn& on_step) {
  lt::clear_caches();  // each run compiles from scratch, and holds only its own executables
  lt::manual_seed(o.seed);
  RunResult r;
  r.model = std::make_shared<nn::DecoderLM>(o.config);
  if (!o.init.empty()) nn::load_per_layer_parameters(*r.model, weights_in(nn::load_file(o.init)));
  nn::ParamMap resumed;
  int64_t done = 0;
  if (!o.resume.empty()) {
    resumed = nn::load_file(o.resume);
    done = checkpoint_steps(nn::load_metadata(o.resume), o.resume);
    nn::load_per_layer_parameters(*r.model, weights_in(resumed));
  }
  r.model->layers_mode = layers_mode(o.mode);
  r.model->scan_options = {.is_layer_pure = true, .remat = o.remat};
  r.ranks = lt::dist::world_size();
  if (o.batch % r.ranks != 0)
    throw UsageError(cat("--batch (the global batch, ", std::to_string(o.batch),
                         " sequences) must be a multiple of the ", std::to_string(r.ranks),
                         " ranks"));
  std::optional<lt::dist::DataParallel> dp;  // rank 0's initial weights on every rank
  if (r.ranks > 1)
    dp.emplace(*r.model, lt::dist::DataParallelOptions{.bucket_bytes = o.bucket_bytes,
                                                       .shard_optimizer = o.shard_optimizer,
                                                       .reduce_dtype = o.reduce_dtype});
  lt::optim::AdamW opt(dp ? dp->parameters() : r.model->parameters(), {.lr = o.lr});
  if (!o.resume.empty()) {
    const OptimizerState state = checkpoint_state(resumed, *r.model, o.resume);
    if (dp) {
      dp->load_optimizer_state(opt, state);
    } else {
      std::vector<lt::optim::Optimizer::State> each;
      for (const std::string& name : r.model->named_parameters().keys())
        each.push_back(state.at(name));
      opt.load_state(each);
    }
  }
  resumed = {};
  lt::sync();
  std::mt19937_64 rng(o.seed + 1);  // the same on every rank: one global batch
  const int64_t b = o.batch, t = o.seq;
  // the batches of the steps done, drawn again: a resumed run reads the data it would have
  rng.discard(static_cast<unsigned long long>(done * b));
  const auto [row0, row1] = lt::dist::shard(b);
  std::vector<int64_t> tokens(static_cast<size_t>(b * (t + 1)));
  lt::metrics::reset_peak_memory();
  const int64_t start = lt::metrics::now_ns();
  int64_t steady_wall = 0, steady_trace = 0, steady_collective = 0, steady_wait = 0,
          steady_bytes = 0;
  const int64_t compile0 = lt::metrics::timer_ns("CompileTime");
  for (int64_t step = done + 1; step <= o.steps; ++step) {
    for (int64_t i = 0; i < b; ++i) {
      const size_t at = rng() % (text.size() - static_cast<size_t>(t) - 1);
      for (int64_t j = 0; j <= t; ++j)
        tokens[static_cast<size_t>(i * (t + 1) + j)] = static_cast<unsigned char>(text[at + j]);
    }
    const int64_t w0 = lt::metrics::now_ns(), t0 = lt::metrics::timer_ns("TraceTime");
    const int64_t c0 = lt::metrics::timer_ns("CollectiveTime");
    const int64_t cw0 = lt::metrics::timer_ns("CollectiveWaitTime");
    const int64_t bytes0 = lt::metrics::counter("CollectiveBytes");
    const std::vector<int64_t> mine(tokens.begin() + row0 * (t + 1),
                                    tokens.begin() + row1 * (t + 1));
    lt::Tensor data = lt::tensor(mine, {row1 - row0, t + 1});
    lt::Tensor loss;
    {
      lt::AutocastGuard autocast(o.autocast);
      loss = nn::cross_entropy((*r.model)(lt::slice(data, 1, 0, t)), lt::slice(data, 1, 1, t + 1));
    }
    loss.backward();
    if (dp) {
      dp->reduce_gradients();
      loss = dp->average(loss);
    }
    if (o.clip_grad_norm > 0) {
      if (dp)
        dp->clip_grad_norm_(o.clip_grad_norm);
      else
        lt::nn::clip_grad_norm_(opt.params(), o.clip_grad_norm);
    }
    opt.set_lr(learning_rate(o, step));  // a tensor the update reads: never recompiles
    opt.step();
    if (dp) dp->gather_parameters();
    opt.zero_grad();
    lt::sync();
    const float l = loss.item<float>();
    const int64_t w1 = lt::metrics::now_ns();
    if (step == done + 1) {  // the first step compiles
      r.first_step_ms = static_cast<double>(w1 - w0) / 1e6;
    } else {
      steady_wall += w1 - w0;
      steady_trace += lt::metrics::timer_ns("TraceTime") - t0;
      steady_collective += lt::metrics::timer_ns("CollectiveTime") - c0;
      steady_wait += lt::metrics::timer_ns("CollectiveWaitTime") - cw0;
      steady_bytes += lt::metrics::counter("CollectiveBytes") - bytes0;
    }
    r.losses.push_back(l);
    if (on_step) on_step(step, l, static_cast<double>(w1 - start) / 1e9);
    const bool save = step == o.steps || (o.checkpoint_every > 0 && step % o.checkpoint_every == 0);
    if (!o.checkpoint.empty() && save) save_checkpoint(o, *r.model, opt, dp ? &*dp : nullptr, step);
  }
  const double steady = static_cast<double>(std::max<int64_t>(o.steps - done - 1, 1));
  r.step_ms =
      o.steps - done > 1 ? static_cast<double>(steady_wall) / 1e6 / steady : r.first_step_ms;
  r.trace_ms_per_step = static_cast<double>(steady_trace) / 1e6 / steady;
  r.collective_ms_per_step = static_cast<double>(steady_collective) / 1e6 / steady;
  r.collective_wait_ms_per_step = static_cast<double>(steady_wait) / 1e6 / steady;
  r.collective_mb_per_step = static_cast<double>(steady_bytes) / 1e6 / steady;
  r.compile_ms = static_cast<double>(lt::metrics::timer_ns("CompileTime") - compile0) / 1e6;
  r.peak_mb = static_cast<double>(lt::metrics::peak_memory_bytes()) / 1e6;
  r.tokens_per_s = static_cast<double>(b * t) / (r.step_ms / 1e3);
  return r;
}

Progress::Progress(int64_t total, int64_t tokens_per_step, int64_t every, int64_t first)
    : total_(total),
      tokens_(tokens_per_step),
      every_(std::max<int64_t>(every, 1)),
      first_(first),
      // (mpirun hands its ranks a terminal even when its own output is a pipe: plain lines)
      tty_(isatty(fileno(stdout)) != 0 && !lt::dist::launched_by_mpi()) {}

void Progress::update(int64_t step, float loss, double seconds) {
  const int64_t run = step - first_ + 1;  // steps of this run
  const double rate = static_cast<double>(run * tokens_) / std::max(seconds, 1e-9);
  const double eta = seconds / static_cast<double>(run) * static_cast<double>(total_ - step);
  if (tty_) {
    const int width = 24, filled = static_cast<int>(width * step / std::max<int64_t>(total_, 1));
    std::string bar(static_cast<size_t>(filled), '=');
    bar.resize(static_cast<size_t>(width), ' ');
    const auto e = static_cast<long long>(eta + 0.5);
    std::printf("\r  [%s] step %lld/%lld  loss %.3f  %.0f tok/s  ETA %lld:%02lld ", bar.c_str(),
                static_cast<long long>(step), static_cast<long long>(total_), loss, rate, e / 60,
                e % 60);
    std::fflush(stdout);
  } else if (step % every_ == 0 || step == total_ || step == first_) {
    std::printf("step %lld/%lld loss %.4f tokens/s %.0f eta_s %.0f\n", static_cast<long long>(step),
                static_cast<long long>(total_), loss, rate, eta);
    std::fflush(stdout);
  }
}

void Progress::done() {
  if (tty_) std::printf("\n");
}

}  // namespace cli
