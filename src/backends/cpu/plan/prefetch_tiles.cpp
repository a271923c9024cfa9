// A program pass (plan/pipeline.cpp runs them in order).
// Requires: nothing.
// Provides: FusedStep::read_ahead.
#include "backends/cpu/plan/pipeline.h"

namespace lazytrace::cpu::plan {

// A fused elementwise step that computes a while on what it loads reads the next tile's
// inputs ahead (run_fused): its tile reads its inputs in a burst and then computes, leaving
// memory idle, which a hardware prefetcher that follows a stream a few lines ahead does not
// fill. A step of one op or two per load is a plain stream, which the hardware follows.
void prefetch_tiles(Program& p, const Context&) {
  for (Step& step : p.steps) {
    auto* f = std::get_if<FusedStep>(&step);
    if (f == nullptr) continue;
    int loads = 0, ops = 0;
    for (const Instr& ins : f->program) {
      if (ins.op != ir::OpKind::Data)
        ++ops;
      else if (const View& v = f->loads[static_cast<size_t>(ins.load)];
               !v.is_scalar() && v.is_contiguous())  // the loads run_fused reads ahead
        ++loads;
    }
    f->read_ahead = loads > 0 && ops >= 3 * loads;
  }
}

}  // namespace lazytrace::cpu::plan
