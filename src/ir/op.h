#pragma once
// Op kinds and what the rest of the system needs to know about each: its name, its
// family, and its arity. Shape and dtype rules are in shape_rules.h.
#include <cstdint>

namespace lazytrace::ir {

enum class OpKind : uint8_t {
  // leaves
  Data,         // a materialized buffer: a graph parameter
  Scalar,       // a 0-d constant; values other than 0 and +-1 are scalar parameters
  Iota,         // arange: attrs (as doubles) start, step
  RandUniform,  // operands: seed, offset (int64 scalars); U[0, 1)
  RandNormal,   // operands: seed, offset; N(0, 1)
  Param,        // an input of a traced body (ir/body.h): attrs ints: its index
  // elementwise unary
  Neg,
  Exp,
  Log,
  Sin,
  Cos,
  Tanh,
  Sigmoid,
  Relu,
  Gelu,
  Silu,
  Sqrt,
  Rsqrt,
  Abs,
  Erf,
  Cast,
  // elementwise binary
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Maximum,
  Minimum,
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  // elementwise ternary
  Where,
  // layout: views of their operand
  Reshape,      // to the node's shape
  Permute,      // attrs ints: the permutation
  BroadcastTo,  // to the node's shape
  Slice,        // attrs ints: dim, start, step
  // reductions: attrs ints: the reduced dims (sorted); keepdim in `flag`
  Sum,
  Mean,
  Amax,
  // others
  Matmul,       // batched, with broadcast batch dims
  Concat,       // attrs ints: dim
  IndexSelect,  // attrs ints: dim; operands: input, int index vector
  IndexAdd,     // attrs ints: dim; operands: input, int index vector, source
  // calls of traced bodies (ir/body.h); inlined when a graph is built
  Call,        // operands: the body's inputs; attrs ints: the body's hash; data: the Body
  CallResult,  // operand: a Call or Loop; attrs ints: which result
  Pack,        // operands: inputs a Call takes as one group (reused across calls)
  Loop,        // a scan or while loop (ir/loop.h): operands: its body's inputs, then the
               // leaves of its bodies; data: the Loop; results via CallResult
  // optimizer updates
  AdamW,  // operands: param, grad, exp_avg, exp_avg_sq (one shape), decay, step_size,
          // inv_sqrt_bc2 (0-d); attrs doubles: beta1, beta2, eps; results via CallResult:
          // param, exp_avg, exp_avg_sq after the step
  kCount
};

enum class OpFamily : uint8_t { Leaf, Generator, Elementwise, Layout, Reduce, Other };

struct OpInfo {
  const char* name;
  OpFamily family;
  int arity;  // -1: variadic
};

const OpInfo& op_info(OpKind k);
inline const char* op_name(OpKind k) {
  return op_info(k).name;
}
inline bool is_elementwise(OpKind k) {
  return op_info(k).family == OpFamily::Elementwise;
}
inline bool is_layout(OpKind k) {
  return op_info(k).family == OpFamily::Layout;
}
inline bool is_reduce(OpKind k) {
  return op_info(k).family == OpFamily::Reduce;
}
inline bool is_generator(OpKind k) {
  return op_info(k).family == OpFamily::Generator;
}
inline bool is_compare(OpKind k) {
  return k >= OpKind::Eq && k <= OpKind::Ge;
}

}  // namespace lazytrace::ir
