#pragma once
// Whether the threads share a last-level cache: the CPU backend's loops ask it to choose how
// the updates beside a loop share its weights (loop_overlap.cpp).

namespace lazytrace::cpu {

/**
 * Whether this thread and the pool's share a last-level cache, as measured: a cache line
 * goes to another pool thread and back 32 times, at most every 100 ms (the answer is kept in
 * between); a median trip under 250 ns counts as shared. Cores of one core complex hand a
 * line over faster than cores of two, and a VM's vCPUs may move from one arrangement to the
 * other while it runs. True where there is no other thread; the last answer (at first, true)
 * where none came to measure within 0.2 ms, inside a parallel region, or while a session's
 * tasks hold the threads. LAZYTRACE_SHARED_CACHE=1 or 0 gives the answer instead.
 */
bool threads_share_cache();

}  // namespace lazytrace::cpu
