// GemmChoice (gemm.h): the fastest product kernel per product, timed on the machine at hand.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/gemm.h"
#include "core/hash.h"
#include "metrics/known.h"
#include "runtime/exit_gate.h"

namespace lazytrace::cpu {
namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// How long the timing of one product may take, roughly: each round runs the product once
// per kernel still timed, and a kernel's time is its best round. Rounds go on until the
// budget is spent, at least kMinRounds and at most kMaxRounds: a short product is timed many
// times, a long one (whose one round outlasts the budget) kMinRounds times.
constexpr double kBudgetSeconds = 4e-3;
constexpr int kMinRounds = 3;
constexpr int kMaxRounds = 25;
// A kernel this much slower than the fastest so far is not timed again: the rounds go to the
// kernels that could still win. After the first round (one time per kernel, the least
// trusted) only a kernel kHopeless times slower is dropped.
constexpr double kContend = 1.5;
constexpr double kHopeless = 3.0;
// Another kernel replaces the fixed rule only where it is this much faster: timing noise
// alone does not move a product off the kernels it runs on without the choice.
constexpr double kMargin = 1.05;

}  // namespace

size_t GemmChoice::KeyHash::operator()(const Key& k) const {
  uint64_t h = 0;
  for (int64_t v : k.v) h = hash_combine(h, static_cast<uint64_t>(v));
  return static_cast<size_t>(h);
}

std::optional<GemmPlan> GemmChoice::find(const Key& key) const {
  std::shared_lock lock(mu_);
  auto it = chosen_.find(key);
  if (it == chosen_.end()) return std::nullopt;
  return it->second;
}

void GemmChoice::keep_in(std::string path) {
  std::lock_guard measuring(measuring_);
  if (path == path_) return;
  path_ = std::move(path);
  loaded_ = false;
  stored_.clear();
}

GemmPlan GemmChoice::measure(const Key& key, const std::function<bool(GemmPlan)>& run, bool splits,
                             const std::string& shape, double flops, bool stored) {
  std::lock_guard measuring(measuring_);
  if (std::optional<GemmPlan> plan = find(key)) {
    run(*plan);
    return *plan;
  }
  stored = stored && !path_.empty();
  if (stored && !loaded_) load();
  // a stored plan whose kernel takes the whole product (else: timed, as a new product)
  if (auto it = stored_.find(key); stored && it != stored_.end() && run(it->second)) {
    runtime::close_runs_at_exit();  // as below: after the libraries' exit handlers
    keep(key, Entry{shape, it->second, {}, true});
    return it->second;
  }
  // The candidates: every kernel on the rule's cut (0 .. kGemmLibs - 1: candidate 0 is the
  // fixed rule) and, where the product is cut into blocks, on the other cut. The libraries
  // that generate code at first use (oneDNN, libxsmm) run once untimed on each cut, which
  // also tells whether they take every block; then the candidates that take the product are
  // timed round after round, on the product's own operands, each round in the other order
  // than the last (so drift in the machine's speed touches all alike; the fixed rule last in
  // the first, after the others' runs touched C's pages), and only those within kContend
  // of the fastest (kHopeless after the first round), until one is left.
  constexpr int kCandidates = 2 * kGemmLibs;
  auto plan_of = [](int c) {
    return GemmPlan{static_cast<GemmLib>(c % kGemmLibs), c >= kGemmLibs};
  };
  bool takes[kCandidates] = {}, timed[kCandidates] = {};
  double best[kCandidates] = {};
  for (int c = 0; c < kCandidates; ++c) {
    const GemmPlan plan = plan_of(c);
    if (plan.other_split && !splits) continue;
    const bool generates = plan.lib == GemmLib::OneDnn || plan.lib == GemmLib::Xsmm;
    takes[c] = timed[c] = plan.lib == GemmLib::Lazytrace ||  // the fixed rule takes everything
                          (gemm_lib_available(plan.lib) && (!generates || run(plan)));
  }
  double spent = 0;
  for (int r = 0; r < kMaxRounds; ++r) {
    const double round_start = seconds_now();
    for (int i = 0; i < kCandidates; ++i) {
      const int c = r % 2 == 0 ? kCandidates - 1 - i : i;
      if (!timed[c]) continue;
      const double t0 = seconds_now();
      // a kernel that declined a block is not timed again (the fixed rule takes every one)
      takes[c] = timed[c] = run(plan_of(c)) || plan_of(c).lib == GemmLib::Lazytrace;
      const double t = seconds_now() - t0;
      best[c] = r == 0 ? t : std::min(best[c], t);
    }
    spent += seconds_now() - round_start;
    double fastest = std::numeric_limits<double>::infinity();
    for (int c = 0; c < kCandidates; ++c)
      if (takes[c]) fastest = std::min(fastest, best[c]);
    int left = 0;
    for (int c = 0; c < kCandidates; ++c) {
      timed[c] = timed[c] && best[c] <= (r == 0 ? kHopeless : kContend) * fastest;
      left += timed[c];
    }
    if (left <= 1 || (r + 1 >= kMinRounds && spent >= kBudgetSeconds)) break;
  }
  int pick = 0;
  for (int c = 1; c < kCandidates; ++c)
    if (takes[c] && best[c] < best[pick]) pick = c;
  if (best[pick] * kMargin >= best[0]) pick = 0;
  const GemmPlan plan = plan_of(pick);
  run(plan);  // C holds the kept plan's result, as it will at every run after this one
  // The libraries just run may have registered exit handlers at first use (oneDNN frees its
  // generated kernels in them): the exit gate goes after them, so it runs first at exit and
  // no thread is inside one of their kernels meanwhile (runtime/exit_gate.h).
  runtime::close_runs_at_exit();

  Entry e{shape, plan, {}};
  for (int c = 0; c < kCandidates; ++c)
    e.gflops[c / kGemmLibs][c % kGemmLibs] = takes[c] ? flops / best[c] * 1e-9 : 0.0;
  if (stored) append(key, plan, shape);
  keep(key, std::move(e));
  return plan;
}

void GemmChoice::keep(const Key& key, Entry e) {
  metrics::named_counter(std::string("GemmChoice[") + gemm_lib_name(e.plan.lib) +
                         (e.plan.other_split ? ", other split]" : "]"))
      .add();
  if (e.stored) metrics::named_counter("GemmChoiceStored").add();
  std::unique_lock lock(mu_);
  chosen_.emplace(key, e.plan);
  entries_.push_back(std::move(e));
}

// The file's lines: "<key's 11 numbers> <library> <other split: 0 or 1> <shape>".
void GemmChoice::load() {
  loaded_ = true;
  std::ifstream in(path_);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    Key key{};
    int lib = -1, other = -1;
    for (int64_t& v : key.v) fields >> v;
    fields >> lib >> other;
    if (!fields || lib < 0 || lib >= kGemmLibs || (other != 0 && other != 1) ||
        (lib != 0 && !gemm_lib_available(static_cast<GemmLib>(lib))))
      continue;  // a line cut short by another process, or a library this build lacks
                 // (lib 0, the fixed rule, takes every product)
    stored_[key] = GemmPlan{static_cast<GemmLib>(lib), other == 1};
  }
}

void GemmChoice::append(const Key& key, GemmPlan plan, const std::string& shape) {
  std::string line;
  for (int64_t v : key.v) line += std::to_string(v) + " ";
  line += std::to_string(static_cast<int>(plan.lib)) + (plan.other_split ? " 1 " : " 0 ") + shape +
          "\n";
  std::error_code ec;  // a cache that cannot be written is only a cache not kept
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  // one write of one line to a file opened for appending: processes that measure at once
  // (ranks) interleave whole lines
  const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t n = ::write(fd, line.data(), line.size());
  ::close(fd);
}

std::string gemm_choice_file() {
  const char* dir = std::getenv("LAZYTRACE_CACHE_DIR");
  if (dir == nullptr || *dir == '\0') return {};
  std::string id = "lazytrace gemm choices 1;";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line) && !line.empty();)
    if (line.rfind("vendor_id", 0) == 0 || line.rfind("cpu family", 0) == 0 ||
        line.rfind("model", 0) == 0 || line.rfind("stepping", 0) == 0)
      id += line + ";";
  id += std::to_string(has_avx2_fma()) + std::to_string(has_avx512()) +
        std::to_string(has_avx512_bw_vl()) + ";";
  for (int lib = 0; lib < kGemmLibs; ++lib)
    id += std::to_string(gemm_lib_available(static_cast<GemmLib>(lib)));
  static const char here = 0;
  Dl_info info{};  // the binary this code is in: rebuilt, it starts a file of its own
  struct stat st {};
  if (dladdr(&here, &info) != 0 && info.dli_fname != nullptr && ::stat(info.dli_fname, &st) == 0)
    id += std::string(";") + info.dli_fname + ";" + std::to_string(st.st_size) + ";" +
          std::to_string(st.st_mtime);
  char name[64];
  std::snprintf(name, sizeof name, "gemm-choices-%016llx.txt",
                static_cast<unsigned long long>(std::hash<std::string>{}(id)));
  return (std::filesystem::path(dir) / name).string();
}

std::vector<GemmChoice::Entry> GemmChoice::entries() const {
  std::shared_lock lock(mu_);
  return entries_;
}

void GemmChoice::clear() {
  std::lock_guard measuring(measuring_);
  std::unique_lock lock(mu_);
  chosen_.clear();
  entries_.clear();
}

}  // namespace lazytrace::cpu
