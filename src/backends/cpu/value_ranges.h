#pragma once
// The values a fused step's instructions can take, as intervals, from the values of its
// single-value loads where they are known (pass jit_ranges): where an op's operand never
// leaves the range its formula needs no clamp for, the native code (jit_elementwise.cpp)
// leaves the clamps and their fix-ups out. A NaN is in no interval; the ops keep it by
// their arithmetic then.
#include <limits>
#include <optional>
#include <vector>

#include "backends/cpu/program.h"

namespace lazytrace::cpu {

struct Interval {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
};

/**
 * Per instruction of `st`'s program, an interval that holds every value but NaN it can take
 * (float32 arithmetic: each bound widened past its float rounding). `single[l]`: load l's
 * value where it is one value for the whole step and known; other loads may hold anything.
 */
std::vector<Interval> value_ranges(const FusedStep& st,
                                   const std::vector<std::optional<double>>& single);

/** Whether the native code of unary `op` clamps its operand: exp, tanh, sigmoid, silu. */
bool has_clamps(ir::OpKind op);

/**
 * Whether unary `op` (exp, tanh, sigmoid, silu) gives math.h's value without its clamps and
 * fix-ups for every operand in `x`, and a NaN for a NaN by its arithmetic alone.
 */
bool needs_no_clamps(ir::OpKind op, Interval x);

}  // namespace lazytrace::cpu
