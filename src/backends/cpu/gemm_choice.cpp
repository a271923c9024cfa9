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

// How long the timing of one product may take, roughly, and how many rounds it gets: each
// round runs the product once per kernel, and a kernel's time is its best round.
constexpr double kBudgetSeconds = 4e-3;
constexpr int kMinRounds = 3, kMaxRounds = 25;
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
  // Every kernel once (a warm-up: oneDNN and libxsmm generate code at first use); those that
  // took every block are timed, round after round, on the product's own operands.
  bool takes[kGemmLibs] = {};
  double best[kGemmLibs] = {};
  for (int i = 0; i < kGemmLibs; ++i) {
    const auto lib = static_cast<GemmLib>(i);
    takes[i] = gemm_lib_available(lib) && run(lib);
  }
  takes[0] = true;  // the fixed rule takes everything
  double round_seconds = 0;
  for (int r = 0; r < kMaxRounds; ++r) {
    const double round_start = seconds_now();
    for (int i = 0; i < kGemmLibs; ++i) {
      if (!takes[i]) continue;
      const double t0 = seconds_now();
      run(static_cast<GemmLib>(i));
      const double t = seconds_now() - t0;
      best[i] = r == 0 ? t : std::min(best[i], t);
    }
    if (r == 0) round_seconds = seconds_now() - round_start;
    if (r + 1 >= kMinRounds && (r + 1) * round_seconds >= kBudgetSeconds) break;
  }
  int pick = 0;
  for (int i = 1; i < kGemmLibs; ++i)
    if (takes[i] && best[i] * kMargin < best[0] && (pick == 0 || best[i] < best[pick])) pick = i;
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
