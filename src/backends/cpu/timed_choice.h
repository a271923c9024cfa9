#pragma once
// A choice between two ways of running a step that compute the same values, made by timing
// both on the machine at hand: which way wins differs by machine (caches, memory, vector
// units), so no threshold tuned on one decides it.
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace lazytrace::cpu {

/**
 * One step's trial between its two ways: its runs go both ways in turn (way 1 first); each
 * way's first run is not counted (cold caches); after kTimed more runs each, the way of the
 * faster best run is kept, and counted in the counter "<name>[<way's name>]". Thread-safe.
 */
class TimedTrial {
 public:
  static constexpr int kTimed = 3;
  /** `name` and the two ways' names (`way1` is tried first) name the counters. */
  TimedTrial(const char* name, const char* way0, const char* way1)
      : name_(name), ways_{way0, way1} {}
  /** The way of the next run; `timed` is set while the trial goes on. */
  bool way(bool& timed);
  /** A timed run the way `way` took `ns`. */
  void record(bool way, int64_t ns);

 private:
  const char* name_;
  const char* ways_[2];
  std::mutex mu_;
  int runs_[2] = {0, 0};
  int64_t best_[2] = {INT64_MAX, INT64_MAX};
  std::atomic<int> kept_{-1};  // the way kept, once decided: read without the lock
};

/**
 * Trials by key, for steps that programs make anew (a loop in each program that has it): one
 * per key (its sizes, its threads), shared by the steps of that key.
 */
class TimedChoice {
 public:
  using Key = std::array<int64_t, 4>;
  TimedChoice(const char* name, const char* way0, const char* way1)
      : name_(name), ways_{way0, way1} {}
  std::shared_ptr<TimedTrial> trial(const Key& key);

 private:
  const char* name_;
  const char* ways_[2];
  std::mutex mu_;
  std::vector<std::pair<Key, std::shared_ptr<TimedTrial>>> trials_;  // few: one per loop kind
};

/**
 * Times one run of a step through its trial (none where `trial` is null or decided): way()
 * is the way to run it, and done() records the run's time (a run that throws records none).
 */
class TimedRun {
 public:
  TimedRun(std::shared_ptr<TimedTrial> trial, bool otherwise);
  /** The way this run goes: the trial's, or `otherwise` without one. */
  bool way() const { return way_; }
  /** The run ended: its time goes to the trial while it goes on. */
  void done();

 private:
  std::shared_ptr<TimedTrial> trial_;  // set while this run is on trial
  bool way_;
  int64_t start_ns_ = 0;
};

}  // namespace lazytrace::cpu
