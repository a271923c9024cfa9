#pragma once
// Fused elementwise steps as native code (jit_elementwise.cpp): the step's whole chain runs
// on vector registers, 16 or 8 floats at a time, where the interpreter (fused.cpp) writes
// every op's tile to scratch memory and reads it back. Built with Xbyak (Debian's
// libxbyak-dev, optional) for CPUs with AVX-512 (and BW) or with AVX2 and FMA; the same bits
// as the interpreter's loops, which compute the math of math.h.
#include <memory>

#include "backends/cpu/kernels.h"
#include "backends/cpu/program.h"

namespace lazytrace::cpu {

/** Whether this build and this CPU can compile fused steps to native code. */
bool jit_available();

struct JitOptions {
  /** The code is generated once per process for every step that would get the same (pass
   * jit_cache). */
  bool shared = true;
  /** The loop runs up to 8 vectors at a time, op by op, as the registers and the rows allow
   * (pass jit_interleave). */
  bool interleave = true;
  /** The constants the ops' code loads whole (a polynomial's first coefficient, a
   * division's numerator) stay in registers the step's values leave free, not broadcast at
   * each use (pass jit_constants; AVX-512). */
  bool pin_constants = true;
  /** An exp, tanh, sigmoid or silu whose operand never leaves the range it needs no clamps
   * for, given the step's single values, runs without them: known at compile time, or at
   * each run, with code made for those values (pass jit_ranges). */
  bool ranges = true;
};

/** The options as the passes jit_cache, jit_interleave, jit_constants and jit_ranges set them. */
inline JitOptions jit_options(const runtime::PassSet& passes) {
  return {.shared = passes.on(runtime::Pass::JitCache),
          .interleave = passes.on(runtime::Pass::JitInterleave),
          .pin_constants = passes.on(runtime::Pass::JitConstants),
          .ranges = passes.on(runtime::Pass::JitRanges)};
}

/**
 * A native kernel for fused step `s`, or null where the step has what the generator does
 * not take: a dtype other than float32 (bool for where's condition and comparisons, loaded
 * or stored), a view whose last dim (once the dims every view allows are merged) is neither a
 * run of memory nor one value, an op outside +, -, *, /, neg, abs, relu, exp, log, tanh,
 * sigmoid, silu, erf, gelu, sqrt, rsqrt, comparisons and where, or more values live at once
 * than registers.
 */
std::shared_ptr<const JitKernel> compile_jit(const FusedStep& s, const JitOptions& options);

/** How many vectors `k`'s loop runs at a time (jit_interleave), for describe. */
int jit_vectors(const JitKernel& k);

/** How many of its ops' constants `k` keeps in registers (jit_constants), for describe. */
int jit_constants(const JitKernel& k);

/** What jit_ranges did for `k`, for describe: "" or "; clamps left out" (where the step's
 * values never reach them) or "; clamps checked at each run" (against its scalars). */
const char* jit_ranges_note(const JitKernel& k);

/** Runs `s` through its kernel, its aligned stores past the caches with `stream` (a step that
 * may_stream()); false (nothing done) where it cannot this time: an output that overlaps an
 * input at another offset. The caller then interprets the step. */
bool run_jit(const FusedStep& s, const RunContext& ctx, bool stream);

}  // namespace lazytrace::cpu
