#pragma once
// What every op family shares: input checks, PyTorch's promotion, and node helpers.
#include <initializer_list>

#include "ir/node.h"
#include "ir/shape_rules.h"
#include "lazytrace/ops/ops.h"
#include "trace/tensor_impl.h"

namespace lazytrace::ops {

/** One operand as promotion sees it: a tensor with dims, a 0-d tensor, or a plain number. */
struct PromoteArg {
  DType dtype;
  enum Level { Wrapped = 0, ZeroDim = 1, Dim = 2 } level;
  static PromoteArg of(const Tensor& t) { return {t.dtype(), t.ndim() == 0 ? ZeroDim : Dim}; }
  static PromoteArg of(const Scalar& s) { return {s.kind(), Wrapped}; }
};

/** torch.result_type over the operands. */
DType result_type(std::initializer_list<PromoteArg> args);

/** Throws if t is undefined, naming the op and the argument. */
void check_defined(const char* op, const Tensor& t, const char* arg = "input");

/** The tensor's node, converted to dtype (a scalar constant is re-made, not cast). */
ir::NodePtr node_as(const Tensor& t, DType dtype);
ir::NodePtr cast_node(const ir::NodePtr& n, DType dtype);
/** A 0-d node for a plain number, in dtype. */
ir::NodePtr scalar_node(const Scalar& s, DType dtype);

/** "f32[2, 3]" for messages. */
inline std::string type_of(const Tensor& t) {
  return t.type_str();
}

}  // namespace lazytrace::ops
