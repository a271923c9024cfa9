#pragma once
/**
 * Counters and timers, always on, like PyTorch/XLA's metrics report.
 *
 * Counters: TraceCount (ops recorded), CompileCount, CacheHit, CacheMiss, ExecuteCount,
 * SyncCount, TransferToHostCount. Timers: TraceTime, CompileTime, ExecuteTime,
 * TransferToHostTime (read with metrics::timer_ns or as counters "<Timer>Ns").
 */
#include <atomic>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif
#include <cstdint>
#include <string>
#include <vector>

namespace lazytrace::metrics {

/** A named counter; construct once (static) and bump through the reference. */
class Counter {
 public:
  explicit Counter(const char* name);
  void add(int64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }
  void reset() { value_.store(0, std::memory_order_relaxed); }
  const char* name() const { return name_; }

 private:
  const char* name_;
  std::atomic<int64_t> value_{0};
};

/** A named timer: total time and number of samples. */
class Timer {
 public:
  explicit Timer(const char* name);
  void add_ns(int64_t ns) {
    total_ns_.fetch_add(ns, std::memory_order_relaxed);
    samples_.fetch_add(1, std::memory_order_relaxed);
  }
  /** For hot paths: time measured in CPU timestamp ticks, converted when read. */
  void add_ticks(int64_t ticks) {
    total_ticks_.fetch_add(ticks, std::memory_order_relaxed);
    samples_.fetch_add(1, std::memory_order_relaxed);
  }
  int64_t total_ns() const;
  int64_t samples() const { return samples_.load(std::memory_order_relaxed); }
  void reset() {
    total_ns_.store(0, std::memory_order_relaxed);
    total_ticks_.store(0, std::memory_order_relaxed);
    samples_.store(0, std::memory_order_relaxed);
  }
  const char* name() const { return name_; }

 private:
  const char* name_;
  std::atomic<int64_t> total_ns_{0};
  std::atomic<int64_t> total_ticks_{0};
  std::atomic<int64_t> samples_{0};
};

/** Adds the elapsed wall time to a timer when it goes out of scope (in ticks: cheap). */
class ScopedTimer {
 public:
  explicit ScopedTimer(Timer& t);
  ~ScopedTimer();
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Timer& timer_;
  int64_t start_;
};

/** Monotonic nanoseconds. */
int64_t now_ns();
/** A cheap monotonic tick count (the CPU timestamp counter where there is one). */
inline int64_t ticks() {
#if defined(__x86_64__)
  return static_cast<int64_t>(__rdtsc());
#else
  return now_ns();
#endif
}
/** Nanoseconds per tick, calibrated against now_ns(). */
double ns_per_tick();

/** The value of a counter, or of a timer's total in ns ("<Timer>Ns") or its number of samples
 * ("<Timer>Samples"); 0 if unknown. */
int64_t counter(const std::string& name);
/** Total nanoseconds of a timer; 0 if unknown. */
int64_t timer_ns(const std::string& name);
/** Names of all counters and timers. */
std::vector<std::string> counter_names();
std::vector<std::string> timer_names();
/** Text report of every counter and timer. */
std::string report();
/** Zero every counter and timer. */
void reset();

/** Bytes held by tensor buffers (and, while a graph runs, its scratch arena) now, and the most held
 * at once since the last reset_peak_memory() (or since the start). */
int64_t memory_bytes();
int64_t peak_memory_bytes();
void reset_peak_memory();

}  // namespace lazytrace::metrics
