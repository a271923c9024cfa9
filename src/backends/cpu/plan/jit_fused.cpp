// A program pass (plan/pipeline.cpp runs them in order).
// Requires: FusedStep::stream_stores (a kernel that streams its stores is made beside the
// plain one).
// Provides: FusedStep::jit.
#include "backends/cpu/jit_elementwise.h"
#include "backends/cpu/plan/pipeline.h"

namespace lazytrace::cpu::plan {

// Each fused step the code generator takes becomes native code, made once with the program:
// the interpreter writes every op's tile to memory and reads it back, where the native
// kernel keeps the chain on vector registers and touches memory only to load and store.
void jit_fused(Program& p, const Context& c) {
  const JitOptions options = jit_options(c.passes);
  for (Step& step : p.steps)
    if (auto* f = std::get_if<FusedStep>(&step)) f->jit = compile_jit(*f, options);
}

}  // namespace lazytrace::cpu::plan
