#include "backends/cpu/timed_choice.h"

#include <algorithm>
#include <string>

#include "lazytrace/metrics/metrics.h"
#include "metrics/known.h"

namespace lazytrace::cpu {

TimedChoice::Entry& TimedChoice::entry(const Key& key) {
  for (Entry& e : entries_)
    if (e.key == key) return e;
  if (entries_.size() >= 256) entries_.clear();  // programs come and go: start afresh
  entries_.push_back(Entry{key});
  return entries_.back();
}

bool TimedChoice::way(const Key& key, bool& timed) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entry(key);
  timed = e.kept < 0;
  if (!timed) return e.kept == 1;
  return e.runs[1] <= e.runs[0];  // in turn, way 1 first
}

void TimedChoice::record(const Key& key, bool way, int64_t ns) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entry(key);
  if (e.kept >= 0) return;
  const int w = way ? 1 : 0;
  if (e.runs[w]++ > 0) e.best[w] = std::min(e.best[w], ns);  // the first: cold caches
  if (e.runs[0] > kTimed && e.runs[1] > kTimed) {
    e.kept = e.best[1] <= e.best[0] ? 1 : 0;
    metrics::named_counter(std::string(name_) + "[" + ways_[e.kept] + "]").add();
  }
}

TimedRun::TimedRun(TimedChoice* choice, const TimedChoice::Key& key, bool otherwise)
    : key_(key), way_(otherwise) {
  if (choice == nullptr) return;
  bool timed = false;
  way_ = choice->way(key, timed);
  if (!timed) return;
  choice_ = choice;
  start_ns_ = metrics::now_ns();
}

TimedRun::~TimedRun() {
  if (choice_ != nullptr) choice_->record(key_, way_, metrics::now_ns() - start_ns_);
}

}  // namespace lazytrace::cpu
