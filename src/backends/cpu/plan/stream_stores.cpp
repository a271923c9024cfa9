// A program pass (plan/pipeline.cpp runs them in order).
// Requires: nothing.
// Provides: FusedStep::stream_stores.
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/plan/pipeline.h"

namespace lazytrace::cpu::plan {

// A fused elementwise step whose results are larger than the last-level cache cannot leave
// them there for the next step to read: its contiguous stores go straight to memory
// (non-temporal), which spares reading each line before writing it and evicting what the
// caches hold. Smaller results stay cached for their readers.
void stream_stores(Program& p, const Context&) {
  for (Step& step : p.steps) {
    auto* f = std::get_if<FusedStep>(&step);
    if (f == nullptr) continue;
    int64_t bytes = 0;
    for (const auto& s : f->stores) bytes += f->shape.numel() * itemsize(s.dst.dtype);
    f->stream_stores = bytes > last_level_cache_bytes();
  }
}

}  // namespace lazytrace::cpu::plan
