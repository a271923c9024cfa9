#pragma once
// What every op family shares: input checks, PyTorch's promotion, and node helpers.
#include <initializer_list>
#include <memory>
#include <span>
#include <utility>

#include "autograd/tape.h"
#include "core/fixed_vec.h"
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
/** A 0-d node for a plain number, in dtype; an integer that does not fit is an error of op. */
ir::NodePtr scalar_node(const Scalar& s, DType dtype, const char* op = "scalar");
/** scalar_node for a number an op reads (x * 0.5): ops of this thread that read the same
 * number may share one node (pass share_scalars); a tensor made of a number gets its own. */
ir::NodePtr scalar_operand(const Scalar& s, DType dtype, const char* op);

// ---- gradients

/** Sums a gradient of a broadcast result down to `shape` (the VJP of broadcasting). */
Tensor sum_to(const Tensor& g, const Shape& shape);

/** True when an op on these inputs (tensors or pointers; null for numbers) must record a VJP. */
using autograd::needs_grad;

/** A VJP rule with its inputs' types: each gradient the rule returns (in the op's computing
 * dtype and result shape) is summed down to its input's shape and cast to its dtype. */
template <typename F>
struct TypedVjp {
  F rule;
  FixedVec<DType, 4> dtypes;
  std::unique_ptr<Shape[]> shapes;  // the inputs' shapes, where one differs from the result's

  template <typename G>
  TypedVjp(const Tensor& out, std::span<const Tensor* const> inputs, G&& g)
      : rule(std::forward<G>(g)), dtypes(inputs.size()) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor* t = inputs[i];
      if (!t) continue;
      dtypes[i] = t->dtype();
      if (!shapes && t->shape() != out.shape()) shapes = std::make_unique<Shape[]>(inputs.size());
    }
    if (shapes)
      for (size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i]) shapes[i] = inputs[i]->shape();
  }
  std::vector<Tensor> operator()(const Tensor& g) const {
    std::vector<Tensor> grads = rule(g);
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      if (shapes) grads[i] = sum_to(grads[i], shapes[i]);
      grads[i] = astype(grads[i], dtypes[i]);
    }
    return grads;
  }
};

/**
 * Records the VJP of `out` = op(inputs); call only when needs_grad(inputs...) holds, so
 * that ops without gradients never build the closure. Null inputs are numbers, which get
 * no gradient. `vjp(g)` returns one gradient per input in the op's computing dtype and
 * result shape (TypedVjp makes them the inputs' types), so rules never deal with
 * broadcasting or promotion.
 */
template <typename F>
void record_grad(const Tensor& out, const char* name, std::span<const Tensor* const> inputs,
                 F&& vjp) {
  autograd::record_as<TypedVjp<std::decay_t<F>>>(out, name, inputs, out, inputs,
                                                 std::forward<F>(vjp));
}
template <typename F>
void record_grad(const Tensor& out, const char* name, std::initializer_list<const Tensor*> inputs,
                 F&& vjp) {
  record_grad(out, name, std::span<const Tensor* const>(inputs.begin(), inputs.size()),
              std::forward<F>(vjp));
}

/** An op's own result as its VJP keeps it: by node, so the tape holds no cycle; in a
 * create_graph backward, with its history again (autograd::g_running_vjp). */
struct SavedResult {
  ir::NodePtr node;
  explicit SavedResult(const Tensor& t) : node(trace::node_of(t)) {}
  Tensor get() const { return autograd::with_running_history(trace::tensor_of(node), 0); }
};

/**
 * An input as its VJP keeps it: the tensor (whose history a create_graph backward extends)
 * and the node it held when the op read it. A gradient through an input that copy_ has
 * written since would read the new value; get() refuses that, as PyTorch does.
 */
class SavedInput {
 public:
  SavedInput() = default;
  SavedInput(const char* op, const Tensor& t) : op_(op), t_(t), node_(t.impl()->node) {}
  const Tensor& get() const {
    if (t_.defined() && t_.impl()->node != node_) overwritten();
    return t_;
  }

 private:
  [[noreturn]] void overwritten() const;
  const char* op_ = "";
  Tensor t_;
  ir::NodePtr node_;
};

/** "f32[2, 3]" for messages. */
inline std::string type_of(const Tensor& t) {
  return t.type_str();
}

}  // namespace lazytrace::ops
