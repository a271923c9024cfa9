#pragma once
// The program passes: after lowering has made a graph's steps, these run on the Program in
// the order of pipeline.cpp, which says what each requires and provides. The optional ones
// are passes of runtime/passes.def and run only where the PassSet has them on.
#include "backends/cpu/program.h"
#include "runtime/passes.h"

namespace lazytrace::cpu::plan {

struct Context {
  int first_input = -1;  // a body's first input parameter slot (-1: not a body)
  runtime::PassSet passes;
};

/** Runs every pass of the pipeline that `c.passes` has on. */
void run(Program& p, const Context& c);

// the passes, one file each
void attach_updates(Program& p, const Context& c);
void updates_last(Program& p, const Context& c);
void overlap_collectives(Program& p, const Context& c);
void hoist_invariants(Program& p, const Context& c);
void merge_siblings(Program& p, const Context& c);
void allocate_registers(Program& p, const Context& c);
void plan_arena(Program& p, const Context& c);
void find_donations(Program& p, const Context& c);
void pair_products(Program& p, const Context& c);
void order_loop_reads(Program& p, const Context& c);
void prefetch_tiles(Program& p, const Context& c);
void stream_stores(Program& p, const Context& c);
void jit_fused(Program& p, const Context& c);

}  // namespace lazytrace::cpu::plan
