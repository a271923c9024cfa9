#pragma once
// What every op family shares: input checks, PyTorch's promotion, and node helpers.
#include <initializer_list>
#include <utility>

#include "autograd/tape.h"
#include "ir/node.h"
#include "ir/shape_rules.h"
#include "lazytrace/ops/ops.h"
#include "trace/tensor_impl.h"
#include "trace/trace_context.h"

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

// ---- gradients

/** Sums a gradient of a broadcast result down to `shape` (the VJP of broadcasting). */
Tensor sum_to(const Tensor& g, const Shape& shape);

/** True when an op on these inputs (tensors or pointers; null for numbers) must record a VJP. */
using autograd::needs_grad;

/**
 * Records the VJP of `out` = op(inputs); call only when needs_grad(inputs...) holds, so
 * that ops without gradients never build the closure. Null inputs are numbers, which get
 * no gradient. `vjp(g)` returns one gradient per input in
 * the op's computing dtype and result shape; here each is summed to its input's shape
 * and cast to its dtype, so rules never deal with broadcasting or promotion.
 */
template <typename F>
void record_grad(const Tensor& out, const char* name, const std::vector<const Tensor*>& inputs,
                 F&& vjp) {
  std::vector<std::pair<Shape, DType>> types;
  for (const Tensor* t : inputs)
    types.emplace_back(t ? t->shape() : Shape{}, t ? t->dtype() : DType::float32);
  autograd::record(out, name, inputs,
                   [vjp = std::forward<F>(vjp), types = std::move(types)](const Tensor& g) {
                     std::vector<Tensor> grads = vjp(g);
                     for (size_t i = 0; i < grads.size(); ++i) {
                       if (!grads[i].defined()) continue;
                       grads[i] = astype(sum_to(grads[i], types[i].first), types[i].second);
                     }
                     return grads;
                   });
}

/** An op's own result as its VJP keeps it: by node, so the tape holds no cycle. */
struct SavedResult {
  ir::NodePtr node;
  explicit SavedResult(const Tensor& t) : node(trace::node_of(t)) {}
  Tensor get() const { return trace::tensor_of(node); }
};

/** "f32[2, 3]" for messages. */
inline std::string type_of(const Tensor& t) {
  return t.type_str();
}

}  // namespace lazytrace::ops
