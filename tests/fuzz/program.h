#pragma once
// The fuzzer's program representation: a list of nodes (op, attributes, operand indices,
// shape, dtype), each operand an earlier node. Loop and assume_pure nodes hold their bodies,
// programs of the same form whose Param nodes are the body's inputs and whose Outer nodes
// read the enclosing program's nodes (tensors the body captures).
#include <lazytrace/core/dtype.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fuzz {

using lazytrace::DType;
using Dims = std::vector<int64_t>;

inline bool floating(DType d) {
  return lazytrace::is_floating(d);
}
inline bool integral(DType d) {
  return d == DType::int32 || d == DType::int64;
}

enum class Op : uint8_t {
  Input,         // a leaf: ints {domain, lo, hi}, f: float range; `data` when fixed
  Param,         // a body's input: ints {index}
  Outer,         // a node of the enclosing program the body captures: ints {index}
  Full,          // lt::full(shape, f, dtype)
  Arange,        // lt::arange(start, start + n * step, step, dtype): ints {n, start, step}
  Rand,          // lt::rand(shape, dtype)
  Randn,         // lt::randn(shape, dtype)
  Unary,         // kind: UK
  Binary,        // kind: BK, in {a, b}
  BinaryScalar,  // kind: BK; in {t}; f the number (of kind sdtype); ints {scalar_left, static}
  Where,         // in {cond, a, b}
  WhereScalar,   // in {cond, t}; f (of kind sdtype); ints {scalar_is_a}
  Cast,          // astype(t, dtype)
  Reshape,       // reshape(t, shape), ints {dim given as -1, or -1}
  Transpose,     // ints {dim0, dim1}
  Permute,       // ints: the permutation
  BroadcastTo,   // broadcast_to(t, shape)
  Slice,         // ints {dim, start, stop, step}
  Select,        // ints {dim, index}
  Unsqueeze,     // ints {dim}
  Squeeze,       // ints {dim}
  Concat,        // in: the tensors; ints {dim}
  Stack,         // in: the tensors; ints {dim}
  IndexSelect,   // in {t, index}; ints {dim}
  IndexAdd,      // in {t, index, source}; ints {dim}
  Sum,           // ints {all, keepdim, dims...}
  Mean,          // ints {all, keepdim, dims...}
  Amax,          // ints {all, keepdim, dims...}
  Softmax,       // ints {dim}
  LogSoftmax,    // ints {dim}
  Matmul,        // in {a, b}
  Scan,          // in: carries, then xs; ints {n_carry, reverse, remat}; results: carries, ys
  Fori,          // ints {lower, upper, tensor_bounds}; in: ([lower, upper] tensors,) carries
  While,         // in: carries; body outputs: carries, then the condition (of the carries)
  Pure,          // assume_pure: in: args; ints {group, has_static}; f: static value. Calls of
                 // one group share one function (and hold equal bodies)
  Proj,          // result k of a Scan/Fori/While/Pure: in {node}; ints {k}
};

// Unary kinds, in lazytrace's order.
enum class UK : uint8_t {
  Neg,
  Exp,
  Log,
  Log1p,
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
  kCount
};
// Binary kinds: arithmetic, then comparisons.
enum class BK : uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Maximum,
  Minimum,
  Atan2,
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  kCount
};

inline bool is_compare(BK k) {
  return k >= BK::Eq;
}

// Input value domains.
// kFixed: `data` always (a node the shrinker replaced by its values); the others keep `data`
// when set, except in the (c) rerun, which draws new values in the domain.
enum Domain : int64_t { kFloatRange = 0, kIntRange = 1, kBool = 2, kFixed = 3 };

struct Node;

struct Program {
  std::vector<Node> nodes;
  std::vector<int> outputs;
  // a body's parameters (their dtype and shape; Param nodes refer to them by index)
  std::vector<DType> param_dtypes;
  std::vector<Dims> param_shapes;
};

struct Node {
  Op op = Op::Input;
  uint8_t kind = 0;
  std::vector<int> in;
  std::vector<int64_t> ints;
  double f = 0;
  DType sdtype = DType::float32;  // the kind of a scalar operand: float32, int64 or bool_
  DType dtype = DType::float32;
  Dims shape;
  std::vector<double> data;     // Input: fixed values (a shrunk node), else generated
  std::vector<Program> bodies;  // Scan, Fori, While, Pure (the defining call)
  // multi-result nodes: each result's dtype and shape
  std::vector<DType> rdtypes;
  std::vector<Dims> rshapes;
  bool materialize = false;  // sync this node's tensor as soon as it is made
};

const char* op_name(Op op);
/** "%i name": a node in messages. */
std::string label(size_t i, Op op);
const char* unary_name(UK k);
const char* binary_name(BK k);
int64_t numel(const Dims& d);
std::string dims_str(const Dims& d);
bool is_multi(Op op);
// Nodes that create values from nothing (no operands, no body inputs)
bool is_leafish(Op op);

// torch.promote_types, written here (not lazytrace's) so promotion is checked too
DType promote(DType a, DType b);
// torch.result_type for operands given as (dtype, level): level 0 a tensor with dims, 1 a
// 0-d tensor, 2 a plain number (float32 / int64 / bool kind)
DType result_type(const std::vector<std::pair<DType, int>>& args);

/**
 * Recomputes every node's dtype and shape (and multi-results) from its operands and
 * attributes by lazytrace's documented rules; false (with `why`) where an op is invalid.
 * `parent` is the enclosing program of a body (for Outer nodes).
 */
bool infer(Program& p, const Program* parent, std::string* why);
/** The same for node i alone (its operands already inferred). */
bool infer_node(Program& p, size_t i, const Program* parent, std::string* why);

/** The program as text, one node per line (bodies indented). */
std::string to_text(const Program& p, int indent = 0);

/** The program in a line-based form that parse() reads back exactly (for subprocesses). */
std::string serialize(const Program& p);
bool parse(const std::string& text, Program& p, std::string* why);

/** Removes nodes no output reaches (recursively through bodies' Outer reads). */
void dead_code(Program& p);

/** Counts nodes, bodies included. */
int count_nodes(const Program& p);

}  // namespace fuzz
