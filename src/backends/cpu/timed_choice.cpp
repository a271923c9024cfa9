#include "backends/cpu/timed_choice.h"

#include <algorithm>
#include <string>

#include "lazytrace/metrics/metrics.h"
#include "metrics/known.h"

namespace lazytrace::cpu {

bool TimedTrial::way(bool& timed) {
  std::lock_guard<std::mutex> lock(mu_);
  timed = kept_ < 0;
  return timed ? runs_[1] <= runs_[0] : kept_ == 1;
}

void TimedTrial::record(bool way, int64_t ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (kept_ >= 0) return;
  const int w = way ? 1 : 0;
  if (runs_[w]++ > 0) best_[w] = std::min(best_[w], ns);  // the first: cold caches
  if (runs_[0] <= kTimed || runs_[1] <= kTimed) return;
  kept_ = best_[1] <= best_[0] ? 1 : 0;
  metrics::named_counter(std::string(name_) + "[" + ways_[kept_] + "]").add();
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
