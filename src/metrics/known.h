#pragma once
// The counters and timers the library itself records into; defined once so that they
// exist (and show in report()) before anything has run.
#include <string>

#include "lazytrace/metrics/metrics.h"

namespace lazytrace::metrics {

extern Counter trace_count;        // ops recorded
extern Counter compile_count;      // executables built (graph cache misses)
extern Counter cache_hit;          // graph cache hits
extern Counter cache_miss;         // graph cache misses
extern Counter execute_count;      // executables run
extern Counter sync_count;         // syncs that ran a graph
extern Counter transfer_to_host;   // to_vector / item reads
extern Counter cache_evictions;    // executables and compiled bodies the LRU bounds dropped
extern Counter assume_pure_trace;  // functions traced by assume_pure (trace-cache misses)
extern Counter assume_pure_hit;    // assume_pure calls that reused a traced function
extern Counter assume_pure_backward_trace;  // VJPs of traced functions, traced
extern Counter call_pack_built;      // Packs of call arguments and lifted tensors made (not reused)
extern Counter compiled_trace;       // functions traced by compile
extern Counter compiled_hit;         // compile calls that reused a traced function
extern Counter loop_trace;           // loop bodies traced (scan, while_loop, fori_loop)
extern Counter loop_hit;             // scans with is_fn_pure that reused a traced body
extern Counter loop_backward_trace;  // loop VJP bodies traced
extern Counter loop_grad_factored;   // scanned gradients stacked as two thin factors
extern Counter updates_beside_loops;  // AdamW updates compiled to run beside a scan
extern Counter loop_slices_evicted;   // weight slices a loop's thread evicted once read (far cores)
extern Counter body_compile_count;    // traced bodies compiled (calls and loops share them)
extern Counter donated_buffers;       // outputs written into an input's buffer (sync)
extern Counter fused_steps_merged;    // fused steps compiled into an earlier one (merge_siblings)
extern Counter jit_kernels_made;      // native kernels generated (jit_elementwise.h)
extern Counter jit_fused_runs;        // fused steps run as native code (jit_elementwise.h)
extern Counter jit_ranged_runs;       // ... some ops without their clamps (jit_ranges)
extern Counter collective_count;      // exchanges run (all_reduce, ...; a loop's parts each)
extern Counter collective_bytes;      // bytes they took in (each rank's own count)
extern Counter collectives_ahead;     // collectives compiled to run beside later steps
extern Counter collectives_in_loops;  // collectives compiled to start inside a scan

/** A counter made on first use under `name` (per-name counts such as "ExecuteCount[step]"). */
Counter& named_counter(const std::string& name);

extern Timer trace_time;
extern Timer compile_time;
extern Timer execute_time;
extern Timer kernel_time;           // inside kernels only: ExecuteTime minus this is host overhead
extern Timer collective_time;       // inside collectives, waiting for the other ranks included
extern Timer collective_wait_time;  // the run's thread waiting for collectives (not overlapped)
extern Timer transfer_to_host_time;

}  // namespace lazytrace::metrics
