#pragma once
// The tape: what each tensor remembers for reverse mode. A tensor made by an op on inputs
// that require grad gets a Function holding the op's VJP rule (a closure over the tensors
// it needs) and one Edge per input. The tape is made of tensors, not graph nodes, so it
// outlives sync(): a saved tensor that a sync computed is simply a buffer afterwards.
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "lazytrace/autograd/autograd.h"
#include "trace/trace_context.h"

namespace lazytrace::autograd {

struct Function;

/** Autograd state of one tensor (TensorImpl::autograd). */
struct Meta {
  bool requires_grad = false;
  std::shared_ptr<Function> grad_fn;  // null for a leaf
  int output_nr = 0;                  // which output of grad_fn this tensor is
  Tensor grad;                        // a leaf's accumulated gradient
};

/** Where a gradient goes: an output of the Function that made an input, or a leaf's Meta. */
struct Edge {
  std::shared_ptr<Function> fn;
  int output_nr = 0;
  std::shared_ptr<Meta> leaf;
  bool defined() const { return fn || leaf; }
};

/**
 * The VJP of one op: the gradient of the op's output in, one gradient per input out (an
 * undefined tensor where an input gets none). Each returned gradient already has its
 * input's shape and dtype.
 */
using Vjp = std::function<std::vector<Tensor>(const Tensor& grad)>;
/** The VJP of an op with several outputs: one gradient per output in (undefined for an
 * output no gradient reached), one per input out. */
using MultiVjp = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads)>;

struct Function {
  const char* name;
  std::vector<Edge> inputs;
  int num_outputs;
  MultiVjp vjp;  // null once a backward without retain_graph has used it
  Function(const char* n, std::vector<Edge> in, int outputs, MultiVjp f)
      : name(n), inputs(std::move(in)), num_outputs(outputs), vjp(std::move(f)) {}
  ~Function();  // iterative: a long tape is released without deep recursion
  Function(const Function&) = delete;
  Function& operator=(const Function&) = delete;
};

extern thread_local bool g_grad_enabled;
/** Whether ops on this thread record the tape (NoGradGuard turns it off). */
inline bool grad_enabled() {
  return g_grad_enabled;
}

/** The tensor whose history an op on t records into: t, or inside a trace, the stand-in
 * of an outer t (so a traced VJP differentiates with respect to the stand-in). */
inline const Tensor& on_tape(const Tensor& t) {
  return trace::is_outer(t) ? trace::lifted_placeholder(t) : t;
}

inline bool requires_grad(const Tensor& t) {
  const auto& m = on_tape(t).impl()->autograd;
  return m && m->requires_grad;
}
inline bool requires_grad(const Tensor* t) {
  return t && requires_grad(*t);
}

/** True when an op on these inputs must record its VJP. Cheap: a few pointer reads. */
template <typename... Ts>
bool needs_grad(const Ts&... inputs) {
  return grad_enabled() && (requires_grad(inputs) || ...);
}

/** The edge a gradient for `input` follows; undefined if it does not require grad. */
Edge edge_of(const Tensor& input);

/**
 * Makes `out` (a fresh tensor, floating) the result of a Function with `vjp` over
 * `inputs`. Call only when needs_grad(inputs...) holds.
 */
void record(const Tensor& out, const char* name, const std::vector<const Tensor*>& inputs, Vjp vjp);
/** record() for an op with several outputs; outputs that are not floating get no history. */
void record_multi(const std::vector<Tensor>& outs, const char* name,
                  const std::vector<const Tensor*>& inputs, MultiVjp vjp);

/** Drops the gradient history of `t` (it becomes a constant, or stays a leaf). */
void clear_history(const Tensor& t);

}  // namespace lazytrace::autograd
