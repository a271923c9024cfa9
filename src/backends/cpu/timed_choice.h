#pragma once
// A choice between two ways of running a step that compute the same values, made by timing
// both on the machine at hand: which way wins differs by machine (caches, memory, vector
// units), so no threshold tuned on one decides it.
#include <array>
#include <cstdint>
#include <mutex>
#include <vector>

namespace lazytrace::cpu {

/**
 * Per key (what identifies the step: its sizes, its threads), the first runs go both ways
 * in turn; after kTimed runs each way (each way's first run not counted: cold caches) the way
 * with the faster best run is kept. Counters "<name>[<way>]" count the decisions. Thread-safe.
 */
class TimedChoice {
 public:
  static constexpr int kTimed = 3;
  using Key = std::array<int64_t, 4>;
  /** `name` and the two ways' names (`ways[1]` is the way tried first) name the counters. */
  TimedChoice(const char* name, const char* way0, const char* way1)
      : name_(name), ways_{way0, way1} {}
  /** The way of the next run of `key`; `timed` is set while the key is still on trial. */
  bool way(const Key& key, bool& timed);
  /** A timed run of `key` the way `way` took `ns`. */
  void record(const Key& key, bool way, int64_t ns);

 private:
  struct Entry {
    Key key;
    int runs[2] = {0, 0};
    int64_t best[2] = {INT64_MAX, INT64_MAX};
    int kept = -1;  // the way kept, once decided
  };
  Entry& entry(const Key& key);  // with mu_ held
  const char* name_;
  const char* ways_[2];
  std::mutex mu_;
  std::vector<Entry> entries_;  // few: one per kind of step of the programs run
};

/** Times one run of a step through a choice (none where `choice` is null or decided). */
class TimedRun {
 public:
  TimedRun(TimedChoice* choice, const TimedChoice::Key& key, bool otherwise);
  ~TimedRun();
  TimedRun(const TimedRun&) = delete;
  TimedRun& operator=(const TimedRun&) = delete;
  /** The way this run goes: the choice's, or `otherwise` without one. */
  bool way() const { return way_; }

 private:
  TimedChoice* choice_ = nullptr;  // set while this run is on trial
  TimedChoice::Key key_;
  bool way_;
  int64_t start_ns_ = 0;
};

}  // namespace lazytrace::cpu
