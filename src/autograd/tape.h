#pragma once
// The tape: what each tensor remembers for reverse mode. A tensor made by an op on inputs
// that require grad gets a Function holding the op's VJP rule (a closure over the tensors
// it needs, inline) and one Edge per input. The tape is made of tensors, not graph nodes, so it
// outlives sync(): a saved tensor that a sync computed is simply a buffer afterwards.
#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "core/fixed_vec.h"
#include "core/pool.h"

#include "lazytrace/autograd/autograd.h"
#include "trace/trace_context.h"

namespace lazytrace::autograd {

struct Function;

/** A leaf's autograd state (TensorImpl::autograd); a computed tensor has its grad_fn. */
struct Meta {
  Tensor grad;  // the accumulated gradient (TensorImpl::requires_grad says whether it is taken)
  std::atomic<int> updaters{0};  // the optimizers that hold this leaf (hold_for_updates)
  // compile's stand-ins: whether grad was ever set (set_grad, zero_grad), and whether backward
  // added into the grad the tensor started with before that (the outer tensor's, in eager code)
  bool grad_set = false;
  bool added_to_initial_grad = false;
};

/** Whether backward added into t's initial grad (see Meta), before any set_grad. */
inline bool added_to_initial_grad(const Tensor& t) {
  return t.impl()->autograd && t.impl()->autograd->added_to_initial_grad;
}

/** Where a gradient goes: an output of the Function that made an input, or a leaf's Meta.
 * One reference either way (24 bytes: a tape holds one per input of every op). */
class Edge {
 public:
  Edge() = default;
  Edge(std::shared_ptr<Function> fn, int output_nr)
      : target_(std::move(fn)), output_nr_(output_nr) {}
  explicit Edge(std::shared_ptr<Meta> leaf) : target_(std::move(leaf)), output_nr_(kLeaf) {}
  /** The Function, or null for a leaf or an undefined edge. */
  Function* fn() const {
    return output_nr_ == kLeaf ? nullptr : static_cast<Function*>(target_.get());
  }
  /** The Function as its owners hold it (null for a leaf or an undefined edge). */
  std::shared_ptr<Function> fn_owned() const {
    return fn() ? std::static_pointer_cast<Function>(target_) : nullptr;
  }
  Meta* leaf() const { return output_nr_ == kLeaf ? static_cast<Meta*>(target_.get()) : nullptr; }
  int output_nr() const { return output_nr_; }
  bool defined() const { return target_ != nullptr; }
  const void* target() const { return target_.get(); }

 private:
  static constexpr int kLeaf = -1;
  std::shared_ptr<void> target_;
  int output_nr_ = 0;
};

/** Edges made once and shared by the Functions of many calls with the same tensors. */
using SharedEdges = std::shared_ptr<const std::vector<Edge>>;

/** A Function's edges: its own (up to 3 inline), or shared with other calls. */
class Edges {
 public:
  explicit Edges(size_t n) : own_(n) {}
  explicit Edges(SharedEdges shared) : shared_(std::move(shared)) {}
  size_t size() const { return shared_ ? shared_->size() : own_.size(); }
  const Edge* begin() const { return shared_ ? shared_->data() : own_.begin(); }
  const Edge* end() const { return begin() + size(); }
  const Edge& operator[](size_t i) const { return begin()[i]; }
  void set(size_t i, Edge e) { own_[i] = std::move(e); }

 private:
  FixedVec<Edge, 3> own_;
  SharedEdges shared_;
};

/**
 * The VJP of one op, and the edges its gradients follow. A VJP maps the gradients of the
 * outputs (one per output, undefined where none arrived) to one gradient per input
 * (undefined where an input gets none), each with its input's shape and dtype.
 */
struct Function {
  const char* name;
  Edges inputs;
  int num_outputs;
  Function(const char* n, Edges edges, int outputs)
      : name(n), inputs(std::move(edges)), num_outputs(outputs) {}
  virtual ~Function() = default;
  Function(const Function&) = delete;
  Function& operator=(const Function&) = delete;
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grads) = 0;
  /** False once a backward without retain_graph has run the VJP and freed what it saved. */
  virtual bool alive() const = 0;
  virtual void free_saved() = 0;
};

/** A Function with its VJP closure inline: one pooled block per recorded op. `Single`: the
 * closure takes the one output's gradient, not the vector. */
template <typename F, bool Single>
struct FunctionOf final : Function {
  std::optional<F> vjp;
  template <typename... Args>
  FunctionOf(const char* n, Edges edges, int outputs, Args&&... args)
      : Function(n, std::move(edges), outputs), vjp(std::in_place, std::forward<Args>(args)...) {}
  std::vector<Tensor> apply(const std::vector<Tensor>& grads) override {
    if constexpr (Single)
      return (*vjp)(grads[0]);
    else
      return (*vjp)(grads);
  }
  bool alive() const override { return vjp.has_value(); }
  void free_saved() override { vjp.reset(); }
  static void* operator new(size_t) { return PoolFor<FunctionOf>::allocate(); }
  static void operator delete(void* p) { PoolFor<FunctionOf>::deallocate(p); }
};

/** Deletes a Function; one released while another is being deleted waits its turn, so a
 * tape as long as the model is freed without deep recursion. */
struct ParkingDeleter {
  void operator()(Function* f) const;
};

/** A Function whose VJP closure of type F is made in place from `args`. */
template <typename F, bool Single, typename... Args>
std::shared_ptr<Function> make_function(const char* name, Edges edges, int outputs,
                                        Args&&... args) {
  return std::shared_ptr<Function>(
      new FunctionOf<F, Single>(name, std::move(edges), outputs, std::forward<Args>(args)...),
      ParkingDeleter{}, PoolAllocator<Function>());
}

/**
 * The Function whose VJP a create_graph backward runs on this thread, or null: an op's
 * own result, which its VJP reads (ops::SavedResult), gets back its history from it, so
 * that the gradient's gradient reaches through the result too.
 */
extern thread_local const std::shared_ptr<Function>* g_running_vjp;
/** t (a result of the running Function, as output `output_nr`) with that history. */
Tensor with_running_history(Tensor t, int output_nr);

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
  const TensorImpl& impl = *on_tape(t).impl();
  return impl.grad_fn || impl.requires_grad;
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
inline Edge edge_of(const Tensor& input) {
  const TensorImpl& impl = *on_tape(input).impl();
  if (impl.grad_fn) return Edge(impl.grad_fn, impl.output_nr);
  if (impl.requires_grad) return Edge(impl.autograd);
  return {};
}

/** Gives fn its edges to `inputs` (null: a number, no edge); fn was made with
 * Edges(inputs.size()). */
void connect(Function& fn, std::span<const Tensor* const> inputs);
/** Makes `outs` fn's outputs; outputs that are not floating get no history. */
void attach(const std::shared_ptr<Function>& fn, std::span<const Tensor> outs);

/** record() below, with the VJP closure of type F made in place from `args`. */
template <typename F, typename... Args>
void record_as(const Tensor& out, const char* name, std::span<const Tensor* const> inputs,
               Args&&... args) {
  if (!is_floating(out.dtype())) return;  // integer and bool results carry no gradient
  auto fn = make_function<F, true>(name, Edges(inputs.size()), 1, std::forward<Args>(args)...);
  connect(*fn, inputs);
  attach(fn, {&out, 1});
}
/**
 * Makes `out` (a fresh tensor) the result of a Function over `inputs` whose VJP is
 * `vjp(grad) -> one gradient per input`. Call only when needs_grad(inputs...) holds.
 */
template <typename F>
void record(const Tensor& out, const char* name, std::span<const Tensor* const> inputs, F&& vjp) {
  record_as<std::decay_t<F>>(out, name, inputs, std::forward<F>(vjp));
}
/** record() for an op with several outputs: `vjp(grads)` gets one gradient per output. */
template <typename F>
void record_multi(const std::vector<Tensor>& outs, const char* name,
                  std::span<const Tensor* const> inputs, F&& vjp) {
  auto fn = make_function<std::decay_t<F>, false>(
      name, Edges(inputs.size()), static_cast<int>(outs.size()), std::forward<F>(vjp));
  connect(*fn, inputs);
  attach(fn, outs);
}
/** record_multi() with edges already made (leaf_edges_of), shared with other calls. */
template <typename F>
void record_multi(const std::vector<Tensor>& outs, const char* name, SharedEdges edges, F&& vjp) {
  attach(make_function<std::decay_t<F>, false>(name, Edges(std::move(edges)),
                                               static_cast<int>(outs.size()), std::forward<F>(vjp)),
         outs);
}

/** The edges to `inputs`, to share between calls; null where one is not a leaf's (sharing
 * another op's edge would keep its whole tape alive for as long as the list is kept). */
SharedEdges leaf_edges_of(std::span<const Tensor* const> inputs);
/** Whether `edges` are still the edges to `inputs`: the same tensors' autograd state, with
 * nothing counted or copied. */
bool same_edges(std::span<const Edge> edges, std::span<const Tensor* const> inputs);

/** Drops the gradient history of `t` (it becomes a constant, or stays a leaf). */
void clear_history(const Tensor& t);

}  // namespace lazytrace::autograd
