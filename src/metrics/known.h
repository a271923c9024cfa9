#pragma once
// The counters and timers the library itself records into; defined once so that they
// exist (and show in report()) before anything has run.
#include "lazytrace/metrics/metrics.h"

namespace lazytrace::metrics {

extern Counter trace_count;       // ops recorded
extern Counter compile_count;     // executables built (graph cache misses)
extern Counter cache_hit;         // graph cache hits
extern Counter cache_miss;        // graph cache misses
extern Counter execute_count;     // executables run
extern Counter sync_count;        // syncs that ran a graph
extern Counter transfer_to_host;  // to_vector / item reads
extern Counter cache_evictions;   // executables dropped by the LRU bound

extern Timer trace_time;
extern Timer compile_time;
extern Timer execute_time;
extern Timer kernel_time;  // inside kernels only: ExecuteTime minus this is host overhead
extern Timer transfer_to_host_time;

}  // namespace lazytrace::metrics
