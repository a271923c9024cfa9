#pragma once
// A fixed pool of worker threads for splitting large kernels over the cores.
#include <cstdint>
#include <functional>

namespace lazytrace::runtime {

/** Number of threads kernels may use (LAZYTRACE_NUM_THREADS, else the core count). */
int num_threads();

/**
 * Runs fn(begin, end) over [0, n) in chunks of at least `grain` items, on the pool and the
 * calling thread. Small n runs inline. Nested calls run inline.
 */
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace lazytrace::runtime
