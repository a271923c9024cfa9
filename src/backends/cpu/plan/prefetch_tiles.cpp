// A program pass (plan/pipeline.cpp runs them in order).
// Requires: nothing.
// Provides: FusedStep::read_ahead.
#include "backends/cpu/plan/pipeline.h"

namespace lazytrace::cpu::plan {

// Every fused elementwise step with a load from memory reads the next tile's inputs ahead
// (run_fused): where they are already in the caches, a prefetch costs an instruction per
// line; where they come from memory, their latency hides behind the current tile's work.
void prefetch_tiles(Program& p, const Context&) {
  for (Step& step : p.steps)
    if (auto* f = std::get_if<FusedStep>(&step))
      for (const View& v : f->loads)
        if (!v.is_scalar()) f->read_ahead = true;
}

}  // namespace lazytrace::cpu::plan
