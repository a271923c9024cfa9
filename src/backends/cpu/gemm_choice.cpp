// GemmChoice (gemm.h): the fastest product kernel per product, timed on the machine at hand.
#include <algorithm>
#include <chrono>
#include <limits>

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

GemmPlan GemmChoice::measure(const Key& key, const std::function<bool(GemmPlan)>& run, bool splits,
                             const std::string& shape, double flops) {
  std::lock_guard measuring(measuring_);
  if (std::optional<GemmPlan> plan = find(key)) {
    run(*plan);
    return *plan;
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
  std::unique_lock lock(mu_);
  chosen_.emplace(key, plan);
  entries_.push_back(std::move(e));
  metrics::named_counter(std::string("GemmChoice[") + gemm_lib_name(plan.lib) +
                         (plan.other_split ? ", other split]" : "]"))
      .add();
  return plan;
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
