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

/**
 * Whether this thread and the pool's share a last-level cache, as measured: a cache line
 * goes to another pool thread and back about 30 times, at most every 100 ms (the answer is
 * kept in between). Cores of one core complex hand a line over in about 100 ns, cores of
 * two in 300 ns and more; a VM's two vCPUs may move from one arrangement to the other while
 * it runs. True where there is no other thread; the last answer (at first, true) where none
 * came to measure within 0.2 ms, inside a parallel region, or while a session's tasks hold
 * the threads. LAZYTRACE_SHARED_CACHE=1 or 0 gives the answer instead.
 */
bool threads_share_cache();

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
};

}  // namespace lazytrace::runtime
