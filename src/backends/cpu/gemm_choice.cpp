// GemmChoice (gemm.h): the fastest product kernel per product, timed on the machine at hand.
#include <algorithm>
#include <chrono>

#include "backends/cpu/gemm.h"
#include "core/hash.h"
#include "metrics/known.h"

namespace lazytrace::cpu {
namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// How long the timing of one product may take, roughly: each round runs the product once
// per kernel, and a kernel's time is its best round. Rounds go on until the budget is spent,
// at most kMaxRounds: a product whose one round outlasts the budget is timed once per
// kernel (its times are long enough to tell apart), a short one many times.
constexpr double kBudgetSeconds = 4e-3;
constexpr int kMaxRounds = 25;
constexpr int kConfirmRounds = 3;
// Another kernel replaces the fixed rule only where it is this much faster: timing noise
// alone does not move a product off the kernels it runs on without the choice.
constexpr double kMargin = 1.05;

}  // namespace

size_t GemmChoice::KeyHash::operator()(const Key& k) const {
  uint64_t h = 0;
  for (int64_t v : k.v) h = hash_combine(h, static_cast<uint64_t>(v));
  return static_cast<size_t>(h);
}

std::optional<GemmLib> GemmChoice::find(const Key& key) const {
  std::shared_lock lock(mu_);
  auto it = chosen_.find(key);
  if (it == chosen_.end()) return std::nullopt;
  return it->second;
}

GemmLib GemmChoice::measure(const Key& key, const std::function<bool(GemmLib)>& run,
                            const std::string& shape, double flops) {
  std::lock_guard measuring(measuring_);
  if (std::optional<GemmLib> lib = find(key)) {
    run(*lib);
    return *lib;
  }
  // The libraries that generate code at first use (oneDNN, libxsmm) run once untimed, which
  // also tells whether they take every block; then every kernel that takes the product is
  // timed round after round, on the product's own operands, until the budget is spent.
  bool takes[kGemmLibs] = {};
  double best[kGemmLibs] = {};
  for (int i = 0; i < kGemmLibs; ++i) {
    const auto lib = static_cast<GemmLib>(i);
    const bool generates = lib == GemmLib::OneDnn || lib == GemmLib::Xsmm;
    takes[i] = gemm_lib_available(lib) && (!generates || run(lib));
  }
  takes[0] = true;  // the fixed rule takes everything
  double spent = 0;
  for (int r = 0; r < kMaxRounds; ++r) {
    const double round_start = seconds_now();
    for (int i = 0; i < kGemmLibs; ++i) {
      if (!takes[i]) continue;
      const double t0 = seconds_now();
      takes[i] = run(static_cast<GemmLib>(i)) || i == 0;  // (declined: not timed again)
      const double t = seconds_now() - t0;
      best[i] = r == 0 ? t : std::min(best[i], t);
    }
    spent += seconds_now() - round_start;
    if (spent >= kBudgetSeconds) break;
  }
  int pick = 0;
  for (int i = 1; i < kGemmLibs; ++i)
    if (takes[i] && best[i] * kMargin < best[0] && (pick == 0 || best[i] < best[pick])) pick = i;
  // A kernel that beat the fixed rule runs against it again, alternately, and is kept only
  // if it still does: a burst of noise in the first rounds does not decide.
  if (pick != 0) {
    for (int r = 0; r < kConfirmRounds; ++r)
      for (int i : {0, pick}) {
        const double t0 = seconds_now();
        run(static_cast<GemmLib>(i));
        best[i] = std::min(best[i], seconds_now() - t0);
      }
    if (best[pick] * kMargin >= best[0]) pick = 0;
  }
  const auto lib = static_cast<GemmLib>(pick);
  run(lib);  // C holds the kept kernel's result, as it will at every run after this one

  Entry e{shape, lib, {}};
  for (int i = 0; i < kGemmLibs; ++i) e.gflops[i] = takes[i] ? flops / best[i] * 1e-9 : 0.0;
  std::unique_lock lock(mu_);
  chosen_.emplace(key, lib);
  entries_.push_back(std::move(e));
  metrics::named_counter(std::string("GemmChoice[") + gemm_lib_name(lib) + "]").add();
  return lib;
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
