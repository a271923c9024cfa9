// A program pass (plan/pipeline.cpp runs them in order).
// Requires: nothing.
// Provides: FusedStep::stream_stores, FusedStep::stream_trial.
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/plan/pipeline.h"
#include "backends/cpu/timed_choice.h"
#include "runtime/thread_pool.h"

namespace lazytrace::cpu::plan {

// A fused elementwise step whose results are larger than the last-level cache cannot leave
// them there for the next step to read: its contiguous stores go straight to memory
// (non-temporal), which spares reading each line before writing it and evicting what the
// caches hold. Results that the threads' L2 caches hold stay cached for their readers. In
// between, how much of the last-level cache is this program's differs by machine (a virtual
// machine's share of a host's cache may be small): with stream_stores_choice, such a step
// is timed both ways over its first runs (fused.cpp).
void stream_stores(Program& p, const Context& c) {
  const int64_t l2 = l2_cache_bytes() * runtime::num_threads();
  const bool timed = c.passes.on(runtime::Pass::StreamStoresChoice);
  for (Step& step : p.steps) {
    auto* f = std::get_if<FusedStep>(&step);
    if (f == nullptr) continue;
    int64_t bytes = 0;
    for (const auto& s : f->stores) bytes += f->shape.numel() * itemsize(s.dst.dtype);
    f->stream_stores = bytes > last_level_cache_bytes();
    if (timed && !f->stream_stores && bytes > l2)
      f->stream_trial = std::make_shared<TimedTrial>("StreamStoresChoice", "cached", "streamed");
  }
}

}  // namespace lazytrace::cpu::plan
