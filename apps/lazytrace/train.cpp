// lazytrace train / report: train a byte-level decoder on a text file.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "commands.h"
#include "run.h"

namespace cli {

namespace {

RunOptions run_options(const Flags& f) {
  RunOptions o;
  o.mode = f.choice("layers-mode", {"loop", "assume-pure", "scan"});
  o.remat =
      f.choice("remat", {"save", "recompute"}) == "save" ? lt::Remat::save : lt::Remat::recompute;
  o.config = model_config(f, o.mode);
  o.steps = f.integer("steps", 1);
  o.batch = f.integer("batch", 1);
  o.seq = f.integer("seq", 2);
  o.lr = f.number("lr");
  if (!(std::isfinite(o.lr) && o.lr >= 0))
    throw UsageError(cat("--lr must be a finite number >= 0, got ", f.str("lr")));
  o.seed = static_cast<uint64_t>(f.integer("seed", 0));
  return o;
}

}  // namespace

int train(int argc, char** argv) {
  Flags f("train",
          "Trains a byte-level decoder (DecoderLM) on a text file with AdamW and saves its\n"
          "weights as safetensors (the model's shape goes into the file's metadata).\n\n"
          "Data parallel over MPI: `mpirun -np N lazytrace train ...` runs N ranks, each on\n"
          "its slice of the global --batch, gradients all-reduced every step (add\n"
          "--oversubscribe for more ranks than cores; LAZYTRACE_NUM_THREADS=1 gives each\n"
          "rank one thread). Rank 0 prints the progress and saves the weights.");
  add_model_flags(f, 200, 4);
  f.add("bucket-mb", "4", "data parallel: MiB of gradients per all-reduce");
  f.add_switch("shard-optimizer",
               "data parallel: ZeRO-1, each rank's AdamW on its 1/N of the parameters");
  f.add("reduce-dtype", "float32",
        "data parallel: the gradients' all-reduces in float32, or bfloat16 (half the bytes; "
        "each rank's gradient and their mean rounded to bfloat16)");
  f.add("warmup-steps", "0", "steps over which the learning rate rises linearly to --lr");
  f.add("lr-schedule", "constant", "after the warmup: constant, or cosine (decays towards 0)");
  f.add("clip-grad-norm", "0", "clip the gradients' norm to this each step (0: no clipping)");
  f.add_switch("autocast",
               "mixed precision: the products in bfloat16 (torch.autocast's policy; "
               "products about twice as fast on CPUs with AVX512_BF16, worth it where they "
               "dominate the step), weights and AdamW in float32");
  f.add("out", "lazytrace-model.safetensors", "where to save the weights");
  f.add("init", "",
        "weights to start from (a file saved by train; its shape wins; AdamW's moments and the "
        "schedule start anew: --resume continues them)");
  f.add("checkpoint", "",
        "write a training checkpoint here (the weights, AdamW's moments and the steps done) "
        "after the last step, and every --checkpoint-every steps");
  f.add("checkpoint-every", "0", "steps between checkpoints (0: after the last step only)");
  f.add("resume", "",
        "continue the run a checkpoint was written by: its weights, AdamW's state, the "
        "schedule and the data from the step after its last (same --layers-mode, --seed and "
        "--batch for the same data; --steps is the run's total)");
  f.add("log-every", "20", "steps between progress lines when not on a terminal");
  if (!f.parse(argc, argv)) return 0;
  const int ranks = lt::dist::init();  // under mpirun: this process's rank of the job
  const bool lead = lt::dist::rank() == 0;
  RunOptions o = run_options(f);
  const double bucket_mb = f.number("bucket-mb");
  if (!(bucket_mb > 0 && bucket_mb <= 1 << 20))
    throw UsageError("--bucket-mb must be in (0, 1048576]");
  o.bucket_bytes = std::max<int64_t>(static_cast<int64_t>(bucket_mb * (1 << 20)), 1);
  o.shard_optimizer = f.given("shard-optimizer");
  if (f.choice("reduce-dtype", {"float32", "bfloat16"}) == "bfloat16")
    o.reduce_dtype = lt::bfloat16;
  o.warmup_steps = f.integer("warmup-steps", 0);
  o.cosine = f.choice("lr-schedule", {"constant", "cosine"}) == "cosine";
  o.autocast = f.given("autocast");
  o.clip_grad_norm = f.number("clip-grad-norm");
  if (!(std::isfinite(o.clip_grad_norm) && o.clip_grad_norm >= 0))
    throw UsageError(
        cat("--clip-grad-norm must be a finite number >= 0, got ", f.str("clip-grad-norm")));
  o.checkpoint = f.str("checkpoint");
  o.checkpoint_every = f.integer("checkpoint-every", 0);
  o.resume = f.str("resume");
  int64_t done = 0;
  if (!o.resume.empty()) {
    if (!f.str("init").empty()) throw UsageError("give --init or --resume, not both");
    const auto meta = lt::nn::load_metadata(o.resume);
    done = checkpoint_steps(meta, o.resume);
    const auto mode = meta.find("layers_mode");
    if (mode != meta.end() && mode->second != o.mode)
      throw UsageError(cat("'", o.resume, "' was written with --layers-mode ", mode->second,
                           "; resume it with the same"));
    if (done >= o.steps)
      throw UsageError(cat("'", o.resume, "' has done ", std::to_string(done),
                           " steps; --steps (the run's total) must be more"));
  }
  if (!o.checkpoint.empty() && lead) check_writable(o.checkpoint, "--checkpoint");
  if (!o.checkpoint.empty() && same_file(o.checkpoint, f.str("out")))
    throw UsageError(
        "--checkpoint and --out name the same file; the weights saved last would "
        "replace the checkpoint: give them different names");
  const std::string start = !o.resume.empty() ? o.resume : f.str("init");
  if (!start.empty()) {
    o.init = f.str("init");
    lt::nn::DecoderConfig c = config_from_metadata(lt::nn::load_metadata(start), start);
    for (const char* k : {"hidden", "intermediate", "heads", "kv-heads", "layers"})
      if (f.given(k))
        throw UsageError(cat(std::string("--"), k, " conflicts with --",
                             o.resume.empty() ? "init" : "resume",
                             ": the model's shape comes from '", start, "'"));
    c.max_seq = std::max(c.max_seq, o.seq);
    c.stacked_layers = o.mode == "scan";
    o.config = c;
  }
  const std::string text = read_text(f.str("text"), o.seq);
  const int64_t log_every = f.integer("log-every", 1);
  if (lead) check_writable(f.str("out"), "--out");  // before the training, not after it
  if (lead) {
    std::printf(
        "training a %lld-layer decoder (hidden %lld) on %s (%zu bytes), %lld steps of %lld x "
        "%lld tokens, layers run by %s",
        static_cast<long long>(o.config.layers), static_cast<long long>(o.config.hidden),
        f.str("text").c_str(), text.size(), static_cast<long long>(o.steps),
        static_cast<long long>(o.batch), static_cast<long long>(o.seq), o.mode.c_str());
    if (ranks > 1)
      std::printf(", data parallel over %d ranks%s%s", ranks,
                  o.shard_optimizer ? " (optimizer sharded)" : "",
                  o.reduce_dtype ? " (gradients reduced in bfloat16)" : "");
    else if (o.shard_optimizer || o.reduce_dtype || f.given("bucket-mb"))
      std::printf(
          ", one rank: --shard-optimizer, --reduce-dtype and --bucket-mb apply to data "
          "parallel runs only (mpirun -np N lazytrace train ...)");
    if (done > 0)
      std::printf(", resuming '%s' after step %lld", o.resume.c_str(),
                  static_cast<long long>(done));
    std::printf("\n");
  }
  Progress progress(o.steps, o.batch * o.seq, log_every, done + 1);
  RunResult r = train_run(o, text, [&](int64_t s, float l, double sec) {
    if (lead) progress.update(s, l, sec);
  });
  if (!lead) return 0;
  progress.done();
  lt::nn::save_file(lt::nn::per_layer_parameters(*r.model), f.str("out"),
                    config_metadata(o.config));
  std::printf(
      "loss %.4f -> %.4f; step %.1f ms (%.0f tokens/s), first step %.1f ms, compile %.1f "
      "ms, trace %.2f ms/step, peak %.0f MB\n",
      r.losses.front(), r.losses.back(), r.step_ms, r.tokens_per_s, r.first_step_ms, r.compile_ms,
      r.trace_ms_per_step, r.peak_mb);
  if (ranks > 1)
    std::printf(
        "collectives %.2f ms/step (%.0f%% of the step), the step waited %.2f ms/step for them; "
        "%.2f MB/step per rank\n",
        r.collective_ms_per_step, 100 * r.collective_ms_per_step / r.step_ms,
        r.collective_wait_ms_per_step, r.collective_mb_per_step);
  std::printf("saved %s\n", f.str("out").c_str());
  return 0;
}

int report(int argc, char** argv) {
  Flags f("report",
          "Runs a short training (train's model and data flags) and prints lt::metrics::report():\n"
          "what was traced, compiled and executed, and the time each took.");
  add_model_flags(f, 5, 4);
  if (!f.parse(argc, argv)) return 0;
  RunOptions o = run_options(f);
  const std::string text = read_text(f.str("text"), o.seq);
  lt::metrics::reset();
  RunResult r = train_run(o, text, nullptr);
  std::printf("%lld steps, layers run by %s, loss %.4f -> %.4f\n\n%s",
              static_cast<long long>(o.steps), o.mode.c_str(), r.losses.front(), r.losses.back(),
              lt::metrics::report().c_str());
  return 0;
}

}  // namespace cli
