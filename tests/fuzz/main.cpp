// lt_fuzz: random programs through lazytrace's public API, checked by four oracles
// (oracles.h): (a) the reference interpreter, (b) each optional pass off, (c) the same
// structure with new data, (d) gradients against central differences.
//
//   lt_fuzz --seed S --count N      seeds S .. S+N-1, one program each
//           --seeds-file F          or the seeds of a file ("A-B", "S", "!S", "# ...")
//           --threads T             T programs at once, sharing the compile cache (the
//                                   compile counters of (c) are then not checked)
//           --repeat R              each seed R times in a row (threads run it together)
//           --oracles a,b,c,d       which oracles (default all; (d) on gradient programs)
//           --passes p,...          (b): only these passes (and "all")
//           --ops-without fam,...   leave op families out (generator.h lists them)
//           --max-ops N             at most N ops at the top level (default 60)
//           --grad 0|1              no / only gradient programs (default: a third)
//           --isolate               run each program in a child first: a crash is a
//                                   failure ("crash"), shrunk in child processes too
//           --shrink                shrink each failing program (shrink.h)
//           --write-regression DIR  shrink and write it as a GoogleTest file in DIR
//           --dump DIR              write failing programs there (serialized)
//           --check-file F          check one serialized program (used by --isolate)
//           --progress K            a line every K programs
//           --stats                 how often each op and dtype occurred, what was compared
//           --verbose               every program, and what was skipped
//
// A failing seed prints "lt_fuzz: seed S failed: <oracle>: <what>" and the program; the
// exit code is 1 if any seed failed. A program the reference finds out of its domain (a
// NaN, an overflow) is skipped, not failed.
#include <lazytrace/lazytrace.h>

#include <unistd.h>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "generator.h"
#include "oracles.h"
#include "regression.h"
#include "shrink.h"

namespace {

using namespace fuzz;

constexpr const char* kHelp =
    "usage:\n"
    "  lt_fuzz --seed S --count N      seeds S .. S+N-1, one program each\n"
    "          --seeds-file F          or the seeds of a file (\"A-B\", \"S\", \"!S\", \"# ...\")\n"
    "          --threads T             T programs at once, sharing the compile cache (the\n"
    "                                  compile counters of (c) are then not checked)\n"
    "          --repeat R              each seed R times in a row (threads run it together)\n"
    "          --oracles a,b,c,d       which oracles (default all; (d) on gradient programs)\n"
    "          --passes p,...          (b): only these passes (and \"all\")\n"
    "          --ops-without fam,...   leave op families out (generator.h lists them)\n"
    "          --max-ops N             at most N ops at the top level (default 60)\n"
    "          --grad 0|1              no / only gradient programs (default: a third)\n"
    "          --isolate               run each program in a child first: a crash is a\n"
    "                                  failure (\"crash\"), shrunk in child processes too\n"
    "          --shrink                shrink each failing program (shrink.h)\n"
    "          --write-regression DIR  shrink and write it as a GoogleTest file in DIR\n"
    "          --dump DIR              write failing programs there (serialized)\n"
    "          --check-file F          check one serialized program (used by --isolate)\n"
    "          --progress K            a line every K programs\n"
    "          --stats                 how often each op and dtype occurred, what was compared\n"
    "          --verbose               every program, and what was skipped\n";

struct Args {
  uint64_t seed = 1;
  uint64_t count = 100;
  int threads = 1;
  std::set<char> oracles = {'a', 'b', 'c', 'd'};
  bool shrink = false;
  std::string regression_dir;
  bool verbose = false;
  GenOptions gen;
  std::vector<std::string> passes;
  std::vector<uint64_t> seeds;  // --seeds-file / --seeds: an explicit list
  uint64_t progress = 0;
  int repeat = 1;          // --repeat R: each seed R times in a row (threads run it at once)
  std::string check_file;  // --check-file: check one serialized program (a child process)
  bool isolate = false;    // each program in a child process first: a crash is a failure
  std::string dump_dir;    // --dump DIR: write failing programs there (serialized)
  bool stats = false;      // --stats: what the programs held, and what was compared
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "lt_fuzz: %s\nusage: lt_fuzz --seed S --count N [--threads T] [--oracles a,b,c,d] "
               "[--shrink] [--write-regression DIR] [--ops-without fam,...] [--passes p,...] "
               "[--max-ops N] [--seeds s,s,...] [--seeds-file F] [--repeat R] [--progress K] "
               "[--isolate] [--dump DIR] "
               "[--grad 0|1] [--check-file F] [--verbose]\n",
               why.c_str());
  std::exit(2);
}

// A seeds file: "A-B" (a range), "S", "!S" (leave S out), "#" to the end of a line a comment.
void read_seeds(const std::string& path, std::vector<uint64_t>& out) {
  std::ifstream f(path);
  if (!f) usage("cannot read " + path);
  std::vector<uint64_t> add;
  std::set<uint64_t> skip;
  std::string line;
  while (std::getline(f, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string w;
    while (words >> w) {
      if (w[0] == '!') {
        skip.insert(std::stoull(w.substr(1)));
      } else if (const size_t dash = w.find('-'); dash != std::string::npos) {
        const uint64_t a = std::stoull(w.substr(0, dash)), b = std::stoull(w.substr(dash + 1));
        for (uint64_t s = a; s <= b; ++s) add.push_back(s);
      } else {
        add.push_back(std::stoull(w));
      }
    }
  }
  for (uint64_t s : add)
    if (!skip.count(s)) out.push_back(s);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value for " + k);
      return argv[++i];
    };
    if (k == "--help") {
      // the option list at the top of this file
      std::printf("%s", kHelp);
      std::exit(0);
    }
    if (k == "--seed")
      a.seed = std::stoull(value());
    else if (k == "--count")
      a.count = std::stoull(value());
    else if (k == "--threads")
      a.threads = std::max(1, std::stoi(value()));
    else if (k == "--oracles") {
      a.oracles.clear();
      for (const std::string& o : split(value())) {
        if (o.size() != 1 || o[0] < 'a' || o[0] > 'd') usage("unknown oracle " + o);
        a.oracles.insert(o[0]);
      }
    } else if (k == "--shrink")
      a.shrink = true;
    else if (k == "--write-regression") {
      a.regression_dir = value();
      a.shrink = true;
    } else if (k == "--verbose")
      a.verbose = true;
    else if (k == "--ops-without") {
      for (const std::string& f : split(value())) {
        if (!family_names().count(f)) usage("unknown op family " + f);
        a.gen.without.insert(f);
      }
    } else if (k == "--passes")
      a.passes = split(value());
    else if (k == "--max-ops")
      a.gen.max_ops = std::max(a.gen.min_ops, std::stoi(value()));
    else if (k == "--seeds") {
      for (const std::string& s : split(value())) a.seeds.push_back(std::stoull(s));
    } else if (k == "--seeds-file") {
      read_seeds(value(), a.seeds);
    } else if (k == "--repeat") {
      a.repeat = std::max(1, std::stoi(value()));
    } else if (k == "--progress")
      a.progress = std::stoull(value());
    else if (k == "--grad")
      a.gen.grad = std::stoi(value());
    else if (k == "--check-file")
      a.check_file = value();
    else if (k == "--isolate")
      a.isolate = true;
    else if (k == "--dump")
      a.dump_dir = value();
    else if (k == "--stats")
      a.stats = true;
    else
      usage("unknown argument " + k);
  }
  return a;
}

// For a crash: the seed each thread was running, printed by the signal handler.
constexpr int kMaxThreads = 64;
std::atomic<uint64_t> g_running[kMaxThreads];
std::atomic<int> g_threads{1};
char g_stage[kMaxThreads][kStageSize];
thread_local int g_tid = 0;

void on_crash(int sig) {
  char buf[200];
  // the crashing thread first (its stage is certain), then the others
  for (int k = -1; k < g_threads.load(); ++k) {
    const int t = k < 0 ? g_tid : k;
    if (k == g_tid) continue;
    const uint64_t s = g_running[t].load();
    if (s == ~0ULL) continue;
    const int n =
        std::snprintf(buf, sizeof buf, "lt_fuzz: seed %llu failed: crash: signal %d in %s\n",
                      static_cast<unsigned long long>(s), sig, g_stage[t]);
    if (n > 0) (void)!write(2, buf, static_cast<size_t>(n));
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// --stats: how often each op (unary and binary kinds by name) and dtype occur.
void count_ops(const Program& p, bool body, std::map<std::string, uint64_t>& ops) {
  for (const Node& n : p.nodes) {
    std::string name = n.op == Op::Unary    ? unary_name(static_cast<UK>(n.kind))
                       : n.op == Op::Binary ? binary_name(static_cast<BK>(n.kind))
                       : n.op == Op::BinaryScalar
                           ? std::string(binary_name(static_cast<BK>(n.kind))) + "(scalar)"
                           : op_name(n.op);
    ++ops[name];
    if (body) ++ops["(in a body)"];
    if (!is_multi(n.op)) ++ops[std::string("dtype ") + lazytrace::dtype_short(n.dtype)];
    for (const Program& b : n.bodies) count_ops(b, true, ops);
  }
}

struct Stats {
  std::mutex mu;
  uint64_t ran = 0, skipped = 0, failed = 0, grad = 0, kinks = 0;
  uint64_t checked = 0, exact = 0, undecided = 0, nodes = 0;
  std::map<std::string, uint64_t> ops;
  std::map<std::string, uint64_t> by_oracle;
  std::map<std::string, uint64_t> skip_reasons;
};

}  // namespace

// --check-file: exit 3 if the program fails an oracle, 4 if it is skipped, 5 if it passes with
// its gradient unchecked (a kink), 0 if it passes (a crash kills it).
int check_file(const Args& args) {
  std::ifstream f(args.check_file);
  std::stringstream text;
  text << f.rdbuf();
  Program p;
  std::string why;
  if (!parse(text.str(), p, &why)) {
    std::fprintf(stderr, "lt_fuzz: %s: %s\n", args.check_file.c_str(), why.c_str());
    return 2;
  }
  CheckOptions copt;
  copt.oracles = args.oracles;
  copt.passes = args.passes;
  for (auto& r : g_running) r = ~0ULL;
  g_running[0] = args.seed;
  set_stage_slot(g_stage[0]);
  std::signal(SIGSEGV, on_crash);
  std::signal(SIGABRT, on_crash);
  std::signal(SIGFPE, on_crash);
  std::signal(SIGBUS, on_crash);
  Outcome o = check_program(p, args.gen.grad == 1, args.seed, copt);
  for (const Failure& fl : o.failures) std::printf("%s: %s\n", fl.key.c_str(), fl.what.c_str());
  return !o.failures.empty() ? 3 : o.skipped ? 4 : o.kink ? 5 : 0;
}

// --isolate: the oracles on one seed's program in a child process. A crash is a failure; a
// program that fails there runs again here, where it can be shrunk.
bool check_in_child(const std::string& self, const Args& args, const Generated& g, uint64_t seed,
                    Outcome& o) {
  std::vector<std::string> extra;
  std::string oracles;
  for (char c : args.oracles) {
    if (!oracles.empty()) oracles += ',';
    oracles += c;
  }
  extra = {"--oracles", oracles};
  if (!args.passes.empty()) {
    std::string passes;
    for (const std::string& p : args.passes) {
      if (!passes.empty()) passes += ',';
      passes += p;
    }
    extra.push_back("--passes");
    extra.push_back(passes);
  }
  ChildResult r = run_in_child(self, g.program, g.grad, seed, extra);
  if (!r.ran) return false;
  if (r.crashed) {
    o.failures.push_back({"crash", r.signal});
    return true;
  }
  if (r.exit_code == 0) return true;
  if (r.exit_code == 4) {
    o.skipped = true;
    o.skip_why = "(in the child)";
    return true;
  }
  if (r.exit_code == 5) {
    o.kink = true;
    return true;
  }
  return false;  // failed (or could not run): check here
}

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  char self_buf[4096];
  const ssize_t len = readlink("/proc/self/exe", self_buf, sizeof self_buf - 1);
  const std::string self = len > 0 ? std::string(self_buf, static_cast<size_t>(len)) : argv[0];
  set_self_path(self);
  if (!args.check_file.empty()) return check_file(args);
  std::vector<uint64_t> seeds;
  {
    std::vector<uint64_t> base = args.seeds;
    if (base.empty())
      for (uint64_t i = 0; i < args.count; ++i) base.push_back(args.seed + i);
    for (uint64_t s : base)
      for (int r = 0; r < args.repeat; ++r) seeds.push_back(s);
  }
  for (auto& r : g_running) r = ~0ULL;
  g_threads = std::min(args.threads, kMaxThreads);
  std::signal(SIGSEGV, on_crash);
  std::signal(SIGABRT, on_crash);
  std::signal(SIGFPE, on_crash);
  std::signal(SIGBUS, on_crash);

  CheckOptions copt;
  copt.oracles = args.oracles;
  copt.passes = args.passes;
  copt.count_compiles = args.threads == 1;
  copt.shared_random = args.threads > 1;
  Stats stats;
  std::atomic<size_t> next{0};
  std::mutex out_mu;

  auto worker = [&](int tid) {
    g_tid = tid;
    set_stage_slot(g_stage[tid]);
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= seeds.size()) break;
      const uint64_t seed = seeds[i];
      g_running[tid] = seed;
      Generated g = generate(seed, args.gen);
      if (args.verbose) {
        std::lock_guard<std::mutex> lock(out_mu);
        std::printf("lt_fuzz: seed %llu: %d nodes%s\n%s", static_cast<unsigned long long>(seed),
                    count_nodes(g.program), g.grad ? " (gradient)" : "",
                    to_text(g.program).c_str());
        std::fflush(stdout);
      }
      Outcome o;
      if (!args.isolate || !check_in_child(self, args, g, seed, o))
        o = check_program(g.program, g.grad, seed, copt);
      if (args.verbose) {
        std::lock_guard<std::mutex> lock(out_mu);
        std::printf("  (%d elements checked)\n", o.checked_elements);
      }
      {
        std::lock_guard<std::mutex> lock(stats.mu);
        ++stats.ran;
        stats.grad += g.grad;
        stats.kinks += o.kink;
        stats.checked += static_cast<uint64_t>(o.checked_elements);
        stats.exact += static_cast<uint64_t>(o.exact_elements);
        stats.undecided += static_cast<uint64_t>(o.undecided_elements);
        stats.nodes += static_cast<uint64_t>(count_nodes(g.program));
        if (args.stats) count_ops(g.program, false, stats.ops);
        if (o.skipped) {
          ++stats.skipped;
          ++stats.skip_reasons[o.skip_why.substr(o.skip_why.find(' ') + 1)];
        }
        if (!o.failures.empty()) ++stats.failed;
        for (const Failure& f : o.failures) ++stats.by_oracle[f.key];
        if (args.progress && stats.ran % args.progress == 0) {
          std::printf("lt_fuzz: %llu programs, %llu failed, %llu skipped\n",
                      static_cast<unsigned long long>(stats.ran),
                      static_cast<unsigned long long>(stats.failed),
                      static_cast<unsigned long long>(stats.skipped));
          std::fflush(stdout);
        }
      }
      if (args.verbose && o.skipped) {
        std::lock_guard<std::mutex> lock(out_mu);
        std::printf("lt_fuzz: seed %llu skipped: %s\n", static_cast<unsigned long long>(seed),
                    o.skip_why.c_str());
      }
      if (o.failures.empty()) continue;
      std::ostringstream msg;
      for (const Failure& f : o.failures)
        msg << "lt_fuzz: seed " << seed << " failed: " << f.key << ": " << f.what << "\n";
      msg << to_text(g.program);
      if (!args.dump_dir.empty()) {
        std::filesystem::create_directories(args.dump_dir);
        std::ofstream(args.dump_dir + "/seed" + std::to_string(seed) + ".prog")
            << serialize(g.program);
      }
      if (args.shrink) {
        const Failure& first = o.failures[0];
        ShrinkResult s = shrink(g.program, g.grad, seed, first.key);
        msg << "lt_fuzz: seed " << seed << " shrunk from " << count_nodes(g.program) << " to "
            << count_nodes(s.program) << " nodes (" << s.attempts << " tries): " << s.failure.key
            << ": " << s.failure.what << "\n"
            << to_text(s.program);
        if (!args.regression_dir.empty()) {
          std::string path =
              write_regression(args.regression_dir, s.program, g.grad, seed, s.failure);
          msg << "lt_fuzz: wrote " << path << "\n";
        }
      }
      std::lock_guard<std::mutex> lock(out_mu);
      std::fputs(msg.str().c_str(), stdout);
      std::fflush(stdout);
    }
    g_running[tid] = ~0ULL;
  };
  if (args.threads == 1) {
    worker(0);
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < g_threads; ++t) pool.emplace_back(worker, t);
    for (std::thread& t : pool) t.join();
  }
  std::printf("lt_fuzz: %llu programs, %llu failed, %llu skipped (out of domain)",
              static_cast<unsigned long long>(stats.ran),
              static_cast<unsigned long long>(stats.failed),
              static_cast<unsigned long long>(stats.skipped));
  if (stats.kinks)
    std::printf(", %llu gradients unchecked (a kink within the step)",
                static_cast<unsigned long long>(stats.kinks));
  for (const auto& [k, n] : stats.by_oracle)
    std::printf("; %s: %llu", k.c_str(), static_cast<unsigned long long>(n));
  std::printf("\n");
  if (args.stats) {
    std::printf(
        "lt_fuzz: %llu gradient programs; %.1f nodes a program; (a) compared %llu elements, %llu "
        "of them bit for bit, left %llu undecided\n",
        static_cast<unsigned long long>(stats.grad),
        stats.ran ? static_cast<double>(stats.nodes) / static_cast<double>(stats.ran) : 0.0,
        static_cast<unsigned long long>(stats.checked),
        static_cast<unsigned long long>(stats.exact),
        static_cast<unsigned long long>(stats.undecided));
    for (const auto& [k, n] : stats.ops)
      std::printf("  %-22s %llu\n", k.c_str(), static_cast<unsigned long long>(n));
  }
  if (args.verbose) {
    namespace m = lazytrace::metrics;
    std::printf("lt_fuzz: %lld syncs, %lld compiles, %lld cache hits, %lld executions\n",
                static_cast<long long>(m::counter("SyncCount")),
                static_cast<long long>(m::counter("CompileCount")),
                static_cast<long long>(m::counter("CacheHit")),
                static_cast<long long>(m::counter("ExecuteCount")));
  }
  if (args.verbose)
    for (const auto& [k, n] : stats.skip_reasons)
      std::printf("lt_fuzz: skipped %llu: %s\n", static_cast<unsigned long long>(n), k.c_str());
  return stats.failed ? 1 : 0;
}
