#include "backends/cpu/timed_choice.h"

#include <algorithm>
#include <string>

#include "lazytrace/metrics/metrics.h"
#include "metrics/known.h"

namespace lazytrace::cpu {

bool TimedTrial::way(bool& timed) {
  // decided: every later run of the step asks, without the lock
  if (const int kept = kept_.load(std::memory_order_acquire); kept >= 0) {
    timed = false;
    return kept == 1;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const int kept = kept_.load(std::memory_order_relaxed);
  timed = kept < 0;
  return timed ? runs_[1] <= runs_[0] : kept == 1;
}

void TimedTrial::record(bool way, int64_t ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (kept_.load(std::memory_order_relaxed) >= 0) return;
  const int w = way ? 1 : 0;
  if (runs_[w]++ > 0) best_[w] = std::min(best_[w], ns);  // the first: cold caches
  if (runs_[0] <= kTimed || runs_[1] <= kTimed) return;
  const int kept = best_[1] <= best_[0] ? 1 : 0;
  kept_.store(kept, std::memory_order_release);
  metrics::named_counter(std::string(name_) + "[" + ways_[kept] + "]").add();
}

std::shared_ptr<TimedTrial> TimedChoice::trial(const Key& key) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [k, t] : trials_)
    if (k == key) return t;
  if (trials_.size() >= 256) trials_.clear();  // programs come and go: start afresh
  trials_.emplace_back(key, std::make_shared<TimedTrial>(name_, ways_[0], ways_[1]));
  return trials_.back().second;
}

TimedRun::TimedRun(std::shared_ptr<TimedTrial> trial, bool otherwise) : way_(otherwise) {
  if (!trial) return;
  bool timed = false;
  way_ = trial->way(timed);
  if (!timed) return;
  trial_ = std::move(trial);
  start_ns_ = metrics::now_ns();
}

void TimedRun::done() {
  if (trial_) trial_->record(way_, metrics::now_ns() - start_ns_);
  trial_.reset();
}

}  // namespace lazytrace::cpu
