// The lazytrace command line: a short run of every subcommand, its output files read back,
// the generate loop as one compiled loop, and the errors for bad flags and files.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <lazytrace/lazytrace.h>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code;
  std::string out;  // stdout and stderr
};

CliRun run(const std::string& args, const std::string& launcher = "") {
  const std::string cmd = launcher + LAZYTRACE_CLI + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

#ifdef LAZYTRACE_MPIRUN
// The command line under `mpirun -np <ranks>`, one thread per rank (as root, Open MPI needs
// its two allow-run-as-root variables: set for this command only).
CliRun run_mpi(int ranks, const std::string& args) {
  return run(args, std::string("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") +
                       LAZYTRACE_MPIRUN + " --oversubscribe -np " + std::to_string(ranks) +
                       " -x LAZYTRACE_NUM_THREADS=1 ");
}
#endif

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("lazytrace_cli_" + name + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A strict JSON syntax check (objects, arrays, strings, numbers, literals).
struct Json {
  const std::string& s;
  size_t i = 0;
  void ws() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  }
  bool value() {
    ws();
    if (i >= s.size()) return false;
    if (s[i] == '{') return seq('}', true);
    if (s[i] == '[') return seq(']', false);
    if (s[i] == '"') return str();
    if (s.compare(i, 4, "true") == 0 || s.compare(i, 4, "null") == 0) return i += 4, true;
    if (s.compare(i, 5, "false") == 0) return i += 5, true;
    size_t start = i;
    while (i < s.size() &&
           (std::isdigit(static_cast<unsigned char>(s[i])) || std::strchr("+-.eE", s[i])))
      ++i;
    return i > start;
  }
  bool str() {
    for (++i; i < s.size() && s[i] != '"'; ++i)
      if (s[i] == '\\') ++i;
    return i++ < s.size();
  }
  bool seq(char close, bool object) {
    ++i;
    ws();
    if (i < s.size() && s[i] == close) return ++i, true;
    while (true) {
      ws();
      if (object) {
        if (i >= s.size() || s[i] != '"' || !str()) return false;
        ws();
        if (i >= s.size() || s[i++] != ':') return false;
      }
      if (!value()) return false;
      ws();
      if (i < s.size() && s[i] == ',') {
        ++i;
        continue;
      }
      return i < s.size() && s[i++] == close;
    }
  }
  bool whole() { return value() && (ws(), i == s.size()); }
};

const char* kTiny =
    "--layers 2 --hidden 16 --intermediate 32 --heads 2 --kv-heads 1 --batch 2 --seq 24";

TEST(Cli, HelpOnEveryCommand) {
  CliRun top = run("--help");
  EXPECT_EQ(top.code, 0);
  for (const char* c : {"train", "generate", "compare", "report"}) {
    EXPECT_NE(top.out.find(c), std::string::npos) << c;
    CliRun h = run(std::string(c) + " --help");
    EXPECT_EQ(h.code, 0) << c;
    EXPECT_NE(h.out.find("usage: lazytrace " + std::string(c)), std::string::npos) << h.out;
  }
  EXPECT_NE(run("train --help").out.find("--layers-mode"), std::string::npos);
}

// `mpirun -np 2 lazytrace train`: data parallel over the global --batch, the single
// process's losses (to the 4 decimals printed), rank 0 alone printing and saving.
TEST(Cli, TrainsDataParallelUnderMpirun) {
  EXPECT_NE(run("train --help").out.find("mpirun -np N lazytrace train"), std::string::npos);
#ifndef LAZYTRACE_MPIRUN
  GTEST_SKIP() << "built without MPI";
#else
  const fs::path d = scratch("mpi");
  const std::string model = (d / "m.safetensors").string();
  const std::string args =
      "train --steps 3 --layers 2 --hidden 16 --intermediate 32 --heads 2 "
      "--kv-heads 1 --batch 4 --seq 24 --log-every 1";
  CliRun one = run(args + " --out " + (d / "one.safetensors").string());
  const CliRun two = run_mpi(2, args + " --out " + model);
  const std::string& out = two.out;
  ASSERT_EQ(two.code, 0) << out;
  EXPECT_NE(out.find("data parallel over 2 ranks"), std::string::npos) << out;
  EXPECT_NE(out.find("collectives "), std::string::npos) << out;
  for (const std::string s : {"step 1/3 loss ", "step 2/3 loss ", "step 3/3 loss "}) {
    const size_t a = one.out.find(s), b = out.find(s);
    ASSERT_NE(a, std::string::npos) << one.out;
    ASSERT_NE(b, std::string::npos) << out;
    EXPECT_NEAR(std::stod(out.substr(b + s.size())), std::stod(one.out.substr(a + s.size())), 1e-4)
        << s;
  }
  EXPECT_EQ(out.find("saved"), out.rfind("saved")) << "rank 0 alone saves: " << out;
  EXPECT_TRUE(lt::nn::load_file(model).contains("head.weight"));
  // the gradients reduced in bfloat16: about half the bytes handed to the collectives, a
  // loss near the float32 run's
  const CliRun bf16 = run_mpi(2, args + " --reduce-dtype bfloat16 --out " + model);
  ASSERT_EQ(bf16.code, 0) << bf16.out;
  EXPECT_NE(bf16.out.find("(gradients reduced in bfloat16)"), std::string::npos) << bf16.out;
  const auto number_after = [](const std::string& text, const std::string& what) {
    const size_t at = text.find(what);
    EXPECT_NE(at, std::string::npos) << what << " in " << text;
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + what.size()));
  };
  EXPECT_NEAR(number_after(bf16.out, "step 3/3 loss "), number_after(out, "step 3/3 loss "), 1e-2);
  const auto mb = [&](const std::string& text) {
    return number_after(text, "ms/step for them; ");  // "...; 0.05 MB/step per rank"
  };
  EXPECT_GT(mb(out), 0) << out;
  EXPECT_LT(mb(bf16.out), 0.7 * mb(out)) << bf16.out;
  // the global batch must split evenly over the ranks
  const CliRun odd = run_mpi(2, "train --steps 1 --layers 2 --hidden 16 --batch 3");
  EXPECT_NE(odd.code, 0);
  EXPECT_NE(odd.out.find("must be a multiple of the 2 ranks"), std::string::npos) << odd.out;
#endif
}

TEST(Cli, BadFlagsAndFilesAreClearErrors) {
  struct Case {
    const char* args;
    const char* says;
  } cases[] = {
      {"fly", "unknown command 'fly'"},
      {"train --steps abc", "--steps must be an integer, got 'abc'"},
      {"train --steps 0", "--steps must be at least 1"},
      {"train --colour red", "unknown flag --colour"},
      {"train --steps", "--steps needs a value"},
      {"train --layers-mode spiral", "--layers-mode must be one of loop, assume-pure, scan"},
      {"train --reduce-dtype int8", "--reduce-dtype must be one of float32, bfloat16"},
      {"train --text /nonexistent/file.txt", "cannot read the text file '/nonexistent/file.txt'"},
      {"train --text /tmp", "cannot read the text file '/tmp'"},
      {"train --lr inf", "--lr must be a finite number >= 0, got inf"},
      {"train --lr -0.1", "--lr must be a finite number >= 0, got -0.1"},
      {"train --clip-grad-norm -1", "--clip-grad-norm must be a finite number >= 0, got -1"},
      {"train --lr-schedule linear", "--lr-schedule must be one of constant, cosine"},
      {"train --warmup-steps -2", "--warmup-steps must be at least 0"},
      {"train --hidden 10 --heads 4", "DecoderConfig"},
      {"generate --weights /nonexistent.safetensors", "/nonexistent.safetensors"},
      {"generate --temperature nan", "--temperature must be a finite number >= 0, got nan"},
      {"generate --temperature -1", "--temperature must be a finite number >= 0, got -1"},
      // checked before training, not after it
      {"train --out /nonexistent/dir/m.safetensors",
       "--out '/nonexistent/dir/m.safetensors': '/nonexistent/dir' does not exist"},
      {"train --out /tmp", "--out '/tmp' names no file"},
      {"train --out ''", "--out '' names no file"},
      {"train --out /etc/hostname/m.safetensors", "'/etc/hostname' is not a directory"},
      {"train --log-every 0", "--log-every must be at least 1"},
      {"compare --layers-mode loop", "unknown flag --layers-mode"},  // it runs every mode
  };
  for (const Case& c : cases) {
    CliRun r = run(c.args);
    EXPECT_NE(r.code, 0) << c.args;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << " said: " << r.out;
  }
}

// The loss a train run prints for its first step.
double first_loss(const CliRun& r) {
  const size_t at = r.out.find(" loss ", r.out.find("step 1/"));
  return at == std::string::npos ? -1 : std::stod(r.out.substr(at + 6));
}

// The loss a train run prints for step k of n.
double loss_at(const CliRun& r, int k, int n) {
  const std::string step = "step " + std::to_string(k) + "/" + std::to_string(n) + " loss ";
  const size_t at = r.out.find(step);
  return at == std::string::npos ? -1 : std::stod(r.out.substr(at + step.size()));
}

// A warmup, a cosine decay and clipping each change the updates, never the first loss.
TEST(Cli, TrainWithWarmupCosineAndClipping) {
  const std::string base = std::string("train --steps 3 --out /dev/null ") + kTiny;
  CliRun plain = run(base);
  ASSERT_EQ(plain.code, 0) << plain.out;
  for (const char* extra :
       {" --warmup-steps 3", " --lr-schedule cosine", " --clip-grad-norm 1e-10"}) {
    CliRun r = run(base + extra);
    ASSERT_EQ(r.code, 0) << extra << r.out;
    EXPECT_EQ(loss_at(r, 1, 3), loss_at(plain, 1, 3)) << extra;
    EXPECT_NE(loss_at(r, 3, 3), loss_at(plain, 3, 3)) << extra << r.out << plain.out;
    EXPECT_GT(loss_at(r, 3, 3), 0) << extra << r.out;
  }
}

// The data-parallel flags on one rank change nothing, and the banner says so.
TEST(Cli, DataParallelFlagsOnOneRankAreNamedAsUnused) {
  const std::string base = std::string("train --steps 2 --out /dev/null ") + kTiny;
  const CliRun plain = run(base);
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_EQ(plain.out.find("apply to data parallel runs only"), std::string::npos) << plain.out;
  for (const char* extra : {" --shard-optimizer", " --reduce-dtype bfloat16", " --bucket-mb 1"}) {
    const CliRun r = run(base + extra);
    ASSERT_EQ(r.code, 0) << extra << r.out;
    EXPECT_NE(r.out.find("one rank: --shard-optimizer, --reduce-dtype and --bucket-mb apply to "
                         "data parallel runs only"),
              std::string::npos)
        << extra << r.out;
    EXPECT_EQ(loss_at(r, 2, 2), loss_at(plain, 2, 2)) << extra;
  }
}

// --autocast: the same model and batches with bfloat16 products: the losses follow float32's
// to about the third digit, and training still lowers them.
// A run stopped at a checkpoint and resumed from it trains exactly as the run that never
// stopped: the same weights, AdamW moments and step counts, schedule and data.
TEST(Cli, ResumingACheckpointContinuesTheRunExactly) {
  const fs::path d = scratch("resume");
  const std::string ck = (d / "ck.safetensors").string();
  const std::string shape = "--layers 2 --hidden 16 --intermediate 32 --heads 2 --kv-heads 1 ";
  const std::string data = "--batch 2 --seq 24 --log-every 1 --out /dev/null ";
  for (const char* mode : {"loop", "scan"}) {
    const std::string m = std::string(" --layers-mode ") + mode;
    const std::string sched = " --warmup-steps 2 --lr-schedule cosine --clip-grad-norm 1";
    CliRun whole = run("train --steps 5 " + shape + data + m + sched);
    ASSERT_EQ(whole.code, 0) << whole.out;
    CliRun first = run("train --steps 2 " + shape + data + m + sched + " --checkpoint " + ck);
    ASSERT_EQ(first.code, 0) << first.out;
    EXPECT_EQ(lt::nn::load_metadata(ck).at("steps_done"), "2");
    CliRun rest = run("train --steps 5 " + data + m + sched + " --resume " + ck);
    ASSERT_EQ(rest.code, 0) << rest.out;
    EXPECT_NE(rest.out.find("resuming '" + ck + "' after step 2"), std::string::npos) << rest.out;
    EXPECT_EQ(rest.out.find("step 2/5"), std::string::npos) << rest.out;
    for (int k = 3; k <= 5; ++k) {
      ASSERT_GT(loss_at(whole, k, 5), 0) << whole.out;
      EXPECT_EQ(loss_at(rest, k, 5), loss_at(whole, k, 5)) << mode << " step " << k << rest.out;
    }
    // a checkpoint's weights generate as the weights file's do
    CliRun g = run("generate --weights " + ck + " --prompt 'ab' --max-tokens 3");
    EXPECT_EQ(g.code, 0) << g.out;
  }
  struct Case {
    std::string args;
    const char* says;
  } cases[] = {
      {"--steps 5 --resume " + ck + " --init " + ck, "give --init or --resume, not both"},
      {"--steps 2 --resume " + ck + " --layers-mode scan", "has done 2 steps; --steps"},
      {"--steps 5 --resume " + ck + " --layers-mode loop",
       "was written with --layers-mode scan; resume it with the same"},
      {"--steps 5 --resume " + ck + " --hidden 32 --layers-mode scan",
       "--hidden conflicts with --resume"},
      {"--steps 5 --checkpoint " + ck + " --out " + (d / "." / "ck.safetensors").string(),
       "--checkpoint and --out name the same file"},
      {"--steps 5 --checkpoint /nonexistent/ck.safetensors", "'/nonexistent' does not exist"},
  };
  for (const Case& c : cases) {
    CliRun r = run("train " + c.args);
    EXPECT_NE(r.code, 0) << c.args;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << " said: " << r.out;
  }
  // a weights file is not a checkpoint
  const std::string weights = (d / "w.safetensors").string();
  ASSERT_EQ(run("train --steps 1 " + shape + "--batch 2 --seq 24 --out " + weights).code, 0);
  CliRun r = run("train --steps 3 --resume " + weights);
  EXPECT_NE(r.out.find("is not a training checkpoint"), std::string::npos) << r.out;
  fs::remove_all(d);
}

// ZeRO-1 checkpoints hold AdamW's state whole (gathered from the ranks' shards): resumed
// under mpirun, sharded or not, they give the uninterrupted run's losses; in one process,
// the same within what summing over two ranks changes.
TEST(Cli, ShardedOptimizerCheckpointsResumeOnAnyNumberOfRanks) {
#ifndef LAZYTRACE_MPIRUN
  GTEST_SKIP() << "built without MPI";
#else
  const fs::path d = scratch("zero1");
  const std::string ck = (d / "ck.safetensors").string();
  const std::string shape = "--layers 2 --hidden 16 --intermediate 32 --heads 2 --kv-heads 1 ";
  // (buckets of 1 KiB: several shards, some padded)
  const std::string args = "--batch 4 --seq 24 --log-every 1 --out /dev/null --bucket-mb 0.001 ";
  const std::string zero1 = " --shard-optimizer";
  const CliRun whole = run_mpi(2, "train --steps 5 " + shape + args + zero1);
  ASSERT_EQ(whole.code, 0) << whole.out;
  const CliRun first =
      run_mpi(2, "train --steps 2 " + shape + args + zero1 + " --checkpoint " + ck);
  ASSERT_EQ(first.code, 0) << first.out;
  for (const std::string& more : {zero1, std::string()}) {
    const CliRun rest = run_mpi(2, "train --steps 5 --resume " + ck + " " + args + more);
    ASSERT_EQ(rest.code, 0) << rest.out;
    for (int k = 3; k <= 5; ++k) {
      ASSERT_GT(loss_at(whole, k, 5), 0) << whole.out;
      EXPECT_EQ(loss_at(rest, k, 5), loss_at(whole, k, 5)) << "step " << k << rest.out;
    }
  }
  const CliRun alone = run("train --steps 5 --resume " + ck + " " + args);
  ASSERT_EQ(alone.code, 0) << alone.out;
  for (int k = 3; k <= 5; ++k)
    EXPECT_NEAR(loss_at(alone, k, 5), loss_at(whole, k, 5), 2e-4) << "step " << k << alone.out;
  fs::remove_all(d);
#endif
}

TEST(Cli, TrainWithAutocast) {
  const std::string base = std::string("train --steps 6 --out /dev/null ") + kTiny;
  CliRun plain = run(base), mixed = run(base + " --autocast");
  ASSERT_EQ(plain.code, 0) << plain.out;
  ASSERT_EQ(mixed.code, 0) << mixed.out;
  for (int k = 1; k <= 6; ++k)
    EXPECT_NEAR(loss_at(mixed, k, 6), loss_at(plain, k, 6), 0.02 * loss_at(plain, 1, 6))
        << "step " << k << "\n"
        << mixed.out << plain.out;
  EXPECT_LT(loss_at(mixed, 6, 6), loss_at(mixed, 1, 6)) << mixed.out;
}

TEST(Cli, TrainResumeAndGenerateInOneLoop) {
  const fs::path d = scratch("train");
  const std::string model = (d / "m.safetensors").string();
  for (const char* mode : {"loop", "scan"}) {
    CliRun t =
        run(std::string("train --steps 3 ") + kTiny + " --layers-mode " + mode + " --out " + model);
    ASSERT_EQ(t.code, 0) << t.out;
    EXPECT_NE(t.out.find("step 3/3 loss"), std::string::npos) << t.out;  // not a terminal: lines
    std::map<std::string, std::string> meta = lt::nn::load_metadata(model);
    EXPECT_EQ(meta.at("hidden"), "16");
    // rope_theta and norm_eps as text that reads back exactly (models.save writes them too)
    EXPECT_EQ(std::stod(meta.at("rope_theta")), 10000.0);
    EXPECT_EQ(std::stod(meta.at("norm_eps")), 1e-6);
    lt::nn::ParamMap w = lt::nn::load_file(model);
    {
      std::map<std::string, std::string> bad = meta;
      bad["rope_theta"] = "big";
      const std::string odd = (d / "odd.safetensors").string();
      lt::nn::save_file(w, odd, bad);
      CliRun g = run("generate --weights " + odd + " --prompt 'a' --max-tokens 2");
      EXPECT_NE(g.out.find("has a bad 'rope_theta' in its metadata: big"), std::string::npos)
          << g.out;
      bad = meta;
      bad["norm_eps"] = "nan";
      lt::nn::save_file(w, odd, bad);
      g = run("generate --weights " + odd + " --prompt 'a' --max-tokens 2");
      EXPECT_NE(g.out.find("has a bad 'norm_eps' in its metadata: nan"), std::string::npos)
          << g.out;
      // weights that are not finite (a diverged run), or not floating: clear errors
      for (bool nan : {true, false}) {
        lt::nn::ParamMap broken;
        for (const auto& [name, t] : w)
          broken.insert(name, name != "norm.weight" ? t
                              : nan                 ? t * std::nanf("")
                                                    : lt::astype(t, lt::DType::int32));
        lt::nn::save_file(broken, odd, meta);
        g = run("generate --weights " + odd + " --prompt 'ab' --max-tokens 3");
        EXPECT_NE(g.code, 0) << g.out;
        EXPECT_NE(g.out.find(nan ? "the model's logits at position 2 are not numbers (NaN)"
                                 : "'norm.weight' is i32[16] but the model's is f32[16]; a "
                                   "weight must be a floating tensor"),
                  std::string::npos)
            << g.out;
      }
    }
    EXPECT_TRUE(w.contains("layers.1.attn.q_proj.weight")) << "per-layer names in every mode";
    // resume from the file; its shape wins, and a conflicting shape flag is an error
    // files hold per-layer weights: the other mode resumes from them too
    // (the first batch is the same in every run: a resumed run's first loss is the file's
    // weights' loss on it, the same in both modes and not a fresh model's)
    const std::string other = std::string(mode) == "scan" ? "loop" : "scan";
    CliRun fresh = run(std::string("train --steps 1 ") + kTiny + " --layers-mode " + other);
    CliRun same_mode = run("train --steps 1 --batch 2 --seq 24 --layers-mode " + std::string(mode) +
                           " --init " + model);
    CliRun again = run("train --steps 2 --batch 2 --seq 24 --layers-mode " + other + " --init " +
                       model + " --out " + model);
    ASSERT_EQ(again.code, 0) << again.out;
    ASSERT_GT(first_loss(fresh), 0) << fresh.out;
    EXPECT_NEAR(first_loss(again), first_loss(same_mode), 2e-4) << again.out << same_mode.out;
    EXPECT_NE(first_loss(again), first_loss(fresh)) << "--init was used";
    CliRun conflict =
        run("train --steps 1 --hidden 32 --layers-mode " + std::string(mode) + " --init " + model);
    EXPECT_NE(conflict.code, 0);
    EXPECT_NE(conflict.out.find("--hidden conflicts with --init"), std::string::npos)
        << conflict.out;

    CliRun g =
        run("generate --weights " + model + " --prompt 'The ' --max-tokens 12 --temperature 0");
    ASSERT_EQ(g.code, 0) << g.out;
    EXPECT_EQ(g.out.rfind("The ", 0), 0u) << g.out;
    // the whole sampling loop: one compiled graph, run once (no per-token sync)
    EXPECT_NE(g.out.find("12 tokens in one loop: 1 compile(s), 1 execution(s)"), std::string::npos)
        << g.out;
    CliRun nl =
        run("generate --weights " + model + " --prompt 'a' --max-tokens 20 --stop-at-newline");
    EXPECT_EQ(nl.code, 0) << nl.out;
    // the text (printed with a newline) stops at its first newline, and only there
    const size_t tail = nl.out.find("[generate] ");
    ASSERT_NE(tail, std::string::npos) << nl.out;
    const std::string text = nl.out.substr(0, tail - 1);
    const int sampled = std::stoi(nl.out.substr(tail + 11));
    EXPECT_EQ(text.rfind('a', 0), 0u) << nl.out;
    EXPECT_EQ(static_cast<int>(text.size()), 1 + sampled) << nl.out;
    const size_t newline = text.find('\n');
    EXPECT_TRUE(newline == std::string::npos || newline == text.size() - 1) << nl.out;
    if (sampled < 20) {
      EXPECT_EQ(newline, text.size() - 1) << "stopped early only at a newline";
    }
    // without --max-tokens, as many as the context leaves (24 - 4 here)
    CliRun fits = run("generate --weights " + model + " --prompt 'The ' --temperature 0");
    ASSERT_EQ(fits.code, 0) << fits.out;
    EXPECT_NE(fits.out.find("20 tokens in one loop"), std::string::npos) << fits.out;
    CliRun too_long = run("generate --weights " + model + " --max-tokens 100");
    EXPECT_NE(too_long.code, 0);
    EXPECT_NE(too_long.out.find("exceed the model's context of 24 tokens"), std::string::npos)
        << too_long.out;
  }
  fs::remove_all(d);
}

TEST(Cli, CompareWritesTableJsonChartAndWeights) {
  const fs::path d = scratch("compare");
  CliRun c = run(std::string("compare --steps 3 ") + kTiny + " --out-dir " + d.string());
  ASSERT_EQ(c.code, 0) << c.out;
  for (const char* mode : {"| loop |", "| assume-pure |", "| scan |"})
    EXPECT_NE(c.out.find(mode), std::string::npos) << c.out;
  const std::string md = read(d / "compare.md");
  EXPECT_NE(md.find("| layers | trace ms/step | compile ms |"), std::string::npos) << md;
  const std::string json = read(d / "compare.json");
  EXPECT_TRUE(Json{json}.whole()) << json;
  size_t runs = 0;
  for (size_t at = json.find("\"layers_mode\""); at != std::string::npos;
       at = json.find("\"layers_mode\"", at + 1))
    ++runs;
  EXPECT_EQ(runs, 3u);
  const std::string png = read(d / "compare.png");
  ASSERT_GE(png.size(), 8u) << "no chart";
  EXPECT_EQ(png.substr(1, 3), "PNG");
  EXPECT_GT(lt::nn::load_file((d / "model.safetensors").string()).size(), 5u);
  fs::remove_all(d);
}

TEST(Cli, ReportPrintsTheMetrics) {
  CliRun r = run(std::string("report --steps 2 ") + kTiny);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* m : {"CompileCount", "ExecuteCount", "TraceTime"})
    EXPECT_NE(r.out.find(m), std::string::npos) << r.out;
}

}  // namespace
