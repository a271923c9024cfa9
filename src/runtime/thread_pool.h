#pragma once
// A fixed pool of worker threads for splitting large kernels over the cores.
#include <cstdint>
#include <functional>

namespace lazytrace::runtime {

/** Number of threads kernels may use (LAZYTRACE_NUM_THREADS, else the core count). */
int num_threads();

/**
 * Runs fn(begin, end) over [0, n) in chunks of at least `grain` items, on the pool and the
 * calling thread. Small n runs inline. Nested calls run inline, and so do calls made while
 * a session's background tasks (below) wait for a thread, if the session holds the threads.
 */
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

/** Whether this thread runs a part of a parallel region (where parallel_for runs inline). */
bool in_parallel_region();

/**
 * Work that runs beside the caller's own: tasks 0, 1, ... of `task`, made runnable in order
 * by publish(), which the pool's threads run whenever they would otherwise wait (between
 * and at the end of the caller's parallel regions). A loop hands its per-iteration
 * optimizer updates here: the other threads run them while the loop's own steps run on the
 * caller alone, and no step waits for a thread busy with an update.
 * Tasks must not call parallel_for. One session at a time.
 */
class Background {
 public:
  /**
   * Starts a session; false (and nothing starts) while another session runs. With
   * `hold_threads`, parallel regions run on the caller alone while published tasks wait
   * (tasks long enough, like an update's block, that waiting for a thread to finish one costs
   * more than it gives); without, the threads join a region between two (short) tasks.
   */
  static bool begin(const std::function<void(int64_t)>& task, bool hold_threads = true);
  /** Tasks [0, n) may run. */
  static void publish(int64_t n);
  /** Tasks [0, n) are all there are: runs the rest on every thread, returns when all ran. */
  static void finish(int64_t n);
  /** Runs published tasks on this thread until no more than `keep` wait for a thread. */
  static void catch_up(int64_t keep);
  /** Published tasks that no thread has taken yet. */
  static int64_t waiting();
  /** Whether a session's published tasks hold the threads now (parallel regions run inline). */
  static bool holds_threads();
};

}  // namespace lazytrace::runtime
