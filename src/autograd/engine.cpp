// The backward engine and the autograd methods of Tensor. A backward pass runs each
// Function's VJP once all gradients flowing into it are summed, in dependency order; the
// VJPs record ops like any other code, so the whole backward pass is one lazy graph.
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "autograd/tape.h"

namespace lazytrace {
namespace autograd {
namespace {

Meta& meta_of(const Tensor& t) {
  auto& m = t.impl()->autograd;
  if (!m) m = std::allocate_shared<Meta>(PoolAllocator<Meta>());
  return *m;
}

// a + b for two gradients of one tensor (same shape and dtype): recorded at the IR level,
// because ops/ sits below this layer.
Tensor add_grads(const Tensor& a, const Tensor& b) {
  trace::OpScope scope;
  Tensor sum = trace::make_pending(
      ir::make_node(ir::OpKind::Add, a.dtype(), a.shape(), trace::node_of(a), trace::node_of(b)));
  if (needs_grad(a, b))  // create_graph: the sum is differentiated too
    record(sum, "add", std::array{&a, &b}, [](const Tensor& g) {
      return std::vector<Tensor>{g, g};
    });
  return sum;
}

Tensor ones_for(const Tensor& t) {
  trace::OpScope scope;
  ir::NodePtr one = ir::make_scalar(1, 1, t.dtype());
  if (t.ndim() == 0) return trace::make_pending(std::move(one));
  return trace::make_pending(ir::make_node(ir::OpKind::BroadcastTo, t.dtype(), t.shape(), one));
}

Tensor zeros_of(const Shape& shape, DType dtype) {
  trace::OpScope scope;
  ir::NodePtr zero = ir::make_scalar(0, 0, dtype);
  if (shape.size() == 0) return trace::make_pending(std::move(zero));
  return trace::make_pending(ir::make_node(ir::OpKind::BroadcastTo, dtype, shape, zero));
}

Tensor zeros_for(const Tensor& t) {
  return zeros_of(t.shape(), t.dtype());
}

void check_grad_shape(const char* op, const Tensor& t, const Tensor& g, size_t i) {
  if (!g.defined())
    fail(op, "gradient ", i, " is undefined; pass a tensor of shape ", t.shape().str(), ".");
  if (g.shape() != t.shape())
    fail(op, "gradient ", i, " has shape ", g.shape().str(), " but its tensor has shape ",
         t.shape().str(), "; the gradient must match the tensor's shape.");
}

Tensor as_dtype(const Tensor& g, DType d) {
  if (g.dtype() == d) return g;
  trace::OpScope scope;
  return trace::make_pending(ir::make_node(ir::OpKind::Cast, d, g.shape(), trace::node_of(g)));
}

// g_running_vjp while a create_graph backward runs one Function's VJP
struct RunningVjp {
  const std::shared_ptr<Function>* before = g_running_vjp;
  explicit RunningVjp(const std::shared_ptr<Function>* f) { g_running_vjp = f; }
  ~RunningVjp() { g_running_vjp = before; }
  RunningVjp(const RunningVjp&) = delete;
  RunningVjp& operator=(const RunningVjp&) = delete;
};

/**
 * Runs reverse mode from `roots` (a tensor and the gradient flowing into it). With
 * `capture` empty, gradients reaching leaves accumulate into their grad(); otherwise
 * they are returned for the captured edges only and no grad() changes.
 */
class Engine {
 public:
  Engine(const char* op, bool retain, bool create) : op_(op), retain_(retain), create_(create) {}

  std::vector<Tensor> run(const std::vector<std::pair<Edge, Tensor>>& roots,
                          const std::vector<Edge>& capture) {
    for (size_t i = 0; i < capture.size(); ++i) {  // an input listed twice: both get it
      if (Function* f = capture[i].fn()) captured_fn_[{f, capture[i].output_nr()}].push_back(i);
      if (Meta* m = capture[i].leaf()) captured_leaf_[m].push_back(i);
    }
    capturing_ = !capture.empty();
    if (!capturing_)
      if (const std::vector<Tensor>* ph = trace::read_only_stand_ins())
        for (const Tensor& t : *ph)
          if (t.impl()->autograd) read_only_.insert(t.impl()->autograd.get());
    results_.resize(capture.size());
    count_dependencies(roots);
    if (capturing_) find_needed(roots);
    std::vector<Function*> ready;
    for (const auto& [edge, g] : roots) deliver(edge, g, ready);
    // the backward's ops are recorded exactly when a graph is created (as torch's)
    std::unique_ptr<NoGradGuard> no_grad;
    std::unique_ptr<EnableGradGuard> with_grad;
    if (create_)
      with_grad = std::make_unique<EnableGradGuard>();
    else
      no_grad = std::make_unique<NoGradGuard>();
    while (!ready.empty()) {
      Function* f = ready.back();
      ready.pop_back();
      auto pg = pending_grad_.find(f);
      if (pg == pending_grad_.end()) {  // no gradient reached it: only release its inputs
        for (const Edge& e : f->inputs)
          if (e.fn()) release(e.fn(), ready);
        continue;
      }
      std::vector<Tensor> g = std::move(pg->second);
      pending_grad_.erase(pg);
      for (int k = 0; k < f->num_outputs; ++k) {
        auto cf = captured_fn_.find({f, k});
        if (cf != captured_fn_.end())
          for (size_t i : cf->second) results_[i] = g[static_cast<size_t>(k)];
      }
      if (capturing_ && !needed_.count(f)) {  // nothing asked for lies behind it: not run
        for (const Edge& e : f->inputs)
          if (e.fn()) release(e.fn(), ready);
        continue;
      }
      if (!f->alive())
        fail(op_, "the graph behind '", f->name,
             "' was already freed by an earlier backward; pass retain_graph = true to the "
             "first backward to go through the graph again.");
      std::optional<RunningVjp> running;
      if (create_) running.emplace(&owners_.at(f));
      std::vector<Tensor> grads = f->apply(g);
      running.reset();
      if (!retain_) f->free_saved();
      for (size_t i = 0; i < f->inputs.size(); ++i) {
        const Edge& e = f->inputs[i];
        if (i < grads.size() && grads[i].defined() && e.defined())
          deliver(e, grads[i], ready);
        else if (e.fn())
          release(e.fn(), ready);
      }
    }
    return std::move(results_);
  }

 private:
  void count_dependencies(const std::vector<std::pair<Edge, Tensor>>& roots) {
    // the roots' edges count as dependencies, as if one Function fed them all
    std::vector<Function*> stack;
    for (const auto& r : roots) {
      Function* f = r.first.fn();
      if (!f) continue;
      auto [it, fresh_fn] = deps_.emplace(f, 0);
      ++it->second;
      if (fresh_fn) stack.push_back(f);
      if (create_) owners_.emplace(f, r.first.fn_owned());
    }
    while (!stack.empty()) {
      Function* f = stack.back();
      stack.pop_back();
      for (const Edge& e : f->inputs) {
        Function* in = e.fn();
        if (!in) continue;
        auto [it, fresh_fn] = deps_.emplace(in, 0);
        ++it->second;
        if (fresh_fn) stack.push_back(in);
        if (create_ && fresh_fn) owners_.emplace(in, e.fn_owned());
      }
    }
  }

  // Capturing: the Functions from which an edge asked for can be reached; only these run
  // (as PyTorch's autograd.grad), so the graph behind the inputs stays for a later backward.
  void find_needed(const std::vector<std::pair<Edge, Tensor>>& roots) {
    std::unordered_map<Function*, bool> memo;
    std::vector<std::pair<Function*, size_t>> stack;  // a Function and its next input
    auto asked = [&](const Edge& e) {
      if (Meta* m = e.leaf()) return captured_leaf_.count(m) > 0;
      return e.fn() && captured_fn_.count({e.fn(), e.output_nr()}) > 0;
    };
    for (const auto& r : roots) {
      Function* root = r.first.fn();
      if (!root || memo.count(root)) continue;
      memo[root] = false;
      stack.emplace_back(root, 0);
      while (!stack.empty()) {
        auto& [f, next] = stack.back();
        if (next < f->inputs.size()) {
          const Edge& e = f->inputs[next++];
          if (asked(e)) memo[f] = true;
          Function* in = e.fn();
          if (!in) continue;
          auto m = memo.find(in);
          if (m == memo.end()) {
            memo[in] = false;
            stack.emplace_back(in, 0);
          } else if (m->second) {
            memo[f] = true;
          }
          continue;
        }
        Function* done = f;
        stack.pop_back();
        if (memo[done] && !stack.empty()) memo[stack.back().first] = true;
      }
    }
    for (const auto& [f, yes] : memo)
      if (yes) needed_.insert(f);
  }

  void deliver(const Edge& e, const Tensor& g, std::vector<Function*>& ready) {
    if (Meta* leaf = e.leaf()) {
      auto cl = captured_leaf_.find(leaf);
      if (capturing_) {
        if (cl != captured_leaf_.end())
          for (size_t i : cl->second) {
            Tensor& r = results_[i];
            r = r.defined() ? add_grads(r, g) : g;
          }
        return;
      }
      if (read_only_.count(leaf))
        fail(trace::tracing_tool(),
             "backward() inside the traced function reaches a tensor "
             "from outside it, whose .grad the function cannot write (it must be pure): return "
             "the loss and call backward() after the call, compute the gradients with "
             "autograd::grad inside and return them, or trace the whole step with compile, "
             "which runs backward() inside.");
      Tensor& acc = leaf->grad;
      if (!acc.defined() && !leaf->grad_set) leaf->added_to_initial_grad = true;
      // a new handle: a stored gradient never aliases a tensor the caller holds; later
      // ones add into it in place, as PyTorch's do (a held .grad sees them), but for
      // create_graph, whose sum is a new tensor with a history
      if (!acc.defined())
        acc = g.detach();
      else if (create_)
        acc = add_grads(acc, g);
      else
        acc.copy_(add_grads(acc, g));
      return;
    }
    Function* f = e.fn();
    std::vector<Tensor>& slots = pending_grad_[f];
    slots.resize(static_cast<size_t>(f->num_outputs));
    Tensor& acc = slots[static_cast<size_t>(e.output_nr())];
    acc = acc.defined() ? add_grads(acc, g) : g;
    release(f, ready);
  }

  void release(Function* f, std::vector<Function*>& ready) {
    if (--deps_[f] == 0) ready.push_back(f);
  }

  const char* op_;
  bool retain_, create_, capturing_ = false;
  std::unordered_map<Function*, int> deps_;
  std::unordered_map<Function*, std::vector<Tensor>> pending_grad_;
  std::map<std::pair<Function*, int>, std::vector<size_t>> captured_fn_;
  std::unordered_map<Meta*, std::vector<size_t>> captured_leaf_;
  std::unordered_set<Function*> needed_;  // capturing: the Functions that run
  // in a trace that writes no outer tensor: the Metas of its stand-ins of outer leaves
  std::unordered_set<const Meta*> read_only_;
  // create_graph: each Function as held, for the results its VJP reads (g_running_vjp)
  std::unordered_map<Function*, std::shared_ptr<Function>> owners_;
  std::vector<Tensor> results_;
};

}  // namespace

thread_local bool g_grad_enabled = true;
thread_local const std::shared_ptr<Function>* g_running_vjp = nullptr;

Tensor with_running_history(Tensor t, int output_nr) {
  if (!g_running_vjp || !g_grad_enabled) return t;
  TensorImpl& impl = *t.impl();
  impl.grad_fn = *g_running_vjp;
  impl.output_nr = output_nr;
  return t;
}

void ParkingDeleter::operator()(Function* f) const {
  // Deleting a Function releases the tensors its VJP saved, whose Functions release
  // theirs: a chain as long as the model. Nested deletions are parked and drained here.
  thread_local int depth = 0;
  thread_local std::vector<Function*> parked;
  if (depth > 0) {
    parked.push_back(f);
    return;
  }
  ++depth;
  delete f;
  while (!parked.empty()) {
    Function* next = parked.back();
    parked.pop_back();
    delete next;
  }
  --depth;
}

void connect(Function& fn, std::span<const Tensor* const> inputs) {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i]) fn.inputs.set(i, edge_of(*inputs[i]));
}

void attach(const std::shared_ptr<Function>& fn, std::span<const Tensor> outs) {
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!is_floating(outs[i].dtype())) continue;
    TensorImpl& impl = *outs[i].impl();
    impl.grad_fn = fn;
    impl.output_nr = static_cast<int>(i);
  }
}

SharedEdges leaf_edges_of(std::span<const Tensor* const> inputs) {
  for (const Tensor* t : inputs)
    if (t && on_tape(*t).impl()->grad_fn) return nullptr;
  auto edges = std::make_shared<std::vector<Edge>>(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i]) (*edges)[i] = edge_of(*inputs[i]);
  return edges;
}

bool same_edges(std::span<const Edge> edges, std::span<const Tensor* const> inputs) {
  if (edges.size() != inputs.size()) return false;
  const bool in_trace = trace::current_context_id() != 0;  // outside one, on_tape(t) is t
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Edge& e = edges[i];
    if (!inputs[i]) {
      if (e.defined()) return false;
      continue;
    }
    const TensorImpl& impl = *(in_trace ? on_tape(*inputs[i]) : *inputs[i]).impl();
    if (impl.grad_fn) return false;  // never shared (leaf_edges_of)
    const bool leaf = impl.requires_grad;
    if (leaf ? e.target() != impl.autograd.get() : e.defined()) return false;
  }
  return true;
}

void clear_history(const Tensor& t) {
  TensorImpl& impl = *t.impl();
  if (!impl.grad_fn) return;
  impl.grad_fn.reset();
  impl.output_nr = 0;
  impl.autograd.reset();
}

void hold_for_updates(const Tensor& leaf, bool hold) {
  std::atomic<int>& n = meta_of(leaf).updaters;
  n.fetch_add(hold ? 1 : -1, std::memory_order_relaxed);
}

bool held_for_updates(const Tensor& leaf) {
  const auto& m = leaf.impl()->autograd;
  return m && m->updaters.load(std::memory_order_relaxed) > 0;
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, GradOptions options) {
  const char* op = "grad";
  if (outputs.empty()) fail(op, "needs at least one output.");
  if (!grad_outputs.empty() && grad_outputs.size() != outputs.size())
    fail(op, "got ", grad_outputs.size(), " grad_outputs for ", outputs.size(),
         " outputs; pass one gradient per output, or none for one-element outputs.");
  std::vector<Edge> capture;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) fail(op, "input ", i, " is an undefined tensor.");
    if (!requires_grad(inputs[i]))
      fail(op, "input ", i, " (", inputs[i].type_str(),
           ") does not require grad; call requires_grad_() on it before the forward pass.");
    capture.push_back(edge_of(inputs[i]));
  }
  std::vector<std::pair<Edge, Tensor>> roots;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& y = outputs[i];
    if (!y.defined()) fail(op, "output ", i, " is an undefined tensor.");
    Tensor g;
    if (grad_outputs.empty()) {
      if (y.numel() != 1)
        fail(op, "output ", i, " has shape ", y.shape().str(),
             "; a gradient can be implied only for a one-element output. Pass grad_outputs.");
      g = ones_for(y);
    } else {
      check_grad_shape(op, y, grad_outputs[i], i);
      g = as_dtype(grad_outputs[i], y.dtype());
    }
    if (requires_grad(y)) roots.emplace_back(edge_of(y), g);
  }
  // as in PyTorch, a graph made for higher derivatives keeps the first one too
  Engine engine(op, options.retain_graph || options.create_graph, options.create_graph);
  std::vector<Tensor> out = engine.run(roots, capture);
  if (options.zeros_for_unused)
    for (size_t i = 0; i < out.size(); ++i)
      if (!out[i].defined()) out[i] = zeros_for(inputs[i]);
  return out;
}

}  // namespace autograd

NoGradGuard::NoGradGuard() : prev_(autograd::g_grad_enabled) {
  autograd::g_grad_enabled = false;
}
NoGradGuard::~NoGradGuard() {
  autograd::g_grad_enabled = prev_;
}
EnableGradGuard::EnableGradGuard() : prev_(autograd::g_grad_enabled) {
  autograd::g_grad_enabled = true;
}
EnableGradGuard::~EnableGradGuard() {
  autograd::g_grad_enabled = prev_;
}
bool is_grad_enabled() {
  return autograd::g_grad_enabled;
}
void set_grad_enabled(bool enabled) {
  autograd::g_grad_enabled = enabled;
}

namespace {
const TensorImpl& checked(const Tensor& t, const char* op) {
  if (!t.defined()) fail(op, "the tensor is undefined (default-constructed).");
  return *t.impl();
}
}  // namespace

Tensor& Tensor::requires_grad_(bool requires_grad) {
  checked(*this, "requires_grad_");
  if (requires_grad && !is_floating(dtype()))
    fail("requires_grad_", "only floating tensors can require gradients; got ", type_str(),
         ". Convert with astype(t, lt::float32) first.");
  if (impl_->grad_fn) {
    if (!requires_grad)
      fail("requires_grad_", "a tensor computed from tensors that require grad (", type_str(),
           ", made by '", impl_->grad_fn->name,
           "') cannot stop requiring grad; use detach() for a copy without history.");
    return *this;
  }
  if (requires_grad) autograd::meta_of(*this);  // where its gradient will accumulate
  impl_->requires_grad = requires_grad;
  return *this;
}

bool Tensor::requires_grad() const {
  checked(*this, "requires_grad");
  return autograd::requires_grad(*this);
}

bool Tensor::is_leaf() const {
  return !checked(*this, "is_leaf").grad_fn;
}

void Tensor::backward() const {
  checked(*this, "backward");
  if (numel() != 1)
    fail("backward", "a gradient can be implied only for a one-element tensor, got ", type_str(),
         "; pass the gradient of this tensor: t.backward(grad).");
  backward(autograd::ones_for(*this));
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  checked(*this, "backward");
  if (!autograd::requires_grad(*this) && !trace::tracing_tool().empty())
    fail(trace::tracing_tool(), "backward() inside the traced function: the tensor (", type_str(),
         ") has no gradient history there (the function must be pure, and tensors from outside "
         "it carry none); return the loss and call backward() after the call, or trace the "
         "whole step with compile, which runs backward() inside.");
  if (!autograd::requires_grad(*this))
    fail("backward", "the tensor (", type_str(),
         ") does not require grad and has no gradient history; call requires_grad_() on the "
         "leaves before the forward pass, and do not run it under NoGradGuard.");
  autograd::check_grad_shape("backward", *this, grad, 0);
  autograd::Engine engine("backward", retain_graph, false);
  engine.run({{autograd::edge_of(*this), autograd::as_dtype(grad, dtype())}}, {});
}

Tensor Tensor::grad() const {
  checked(*this, "grad");
  // Traced: a stand-in's, where the function may run backward() (compile); in a pure
  // function, the outer tensor's own (a value it reads, lifted where used)
  const Tensor& holder =
      trace::is_outer(*this) && !trace::writes_allowed() ? *this : autograd::on_tape(*this);
  const auto& m = holder.impl()->autograd;
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) {
  checked(*this, "set_grad");
  if (grad.defined() && (grad.shape() != shape() || grad.dtype() != dtype()))
    fail("set_grad", "the gradient ", grad.type_str(), " must have the tensor's type ", type_str(),
         ".");
  const Tensor& self = autograd::on_tape(*this);  // a stand-in's, when traced
  if (!grad.defined() && !self.impl()->autograd && !self.impl()->requires_grad) return;
  autograd::Meta& m = autograd::meta_of(self);
  m.grad = grad;
  m.grad_set = true;
}

namespace autograd {

std::vector<Tensor> custom_function(const std::string& name, const std::vector<Tensor>& inputs,
                                    const std::vector<Tensor>& outputs, CustomBackward backward) {
  if (!backward) fail(name, "custom_function needs a backward function.");
  if (outputs.empty()) fail(name, "custom_function needs at least one output.");
  std::vector<const Tensor*> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) fail(name, "input ", i, " is an undefined tensor.");
    in.push_back(&inputs[i]);
  }
  std::vector<Tensor> outs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined()) fail(name, "output ", i, " is an undefined tensor.");
    outs.push_back(outputs[i].detach());  // its own handle: the caller's keeps no history
  }
  bool any = false;
  for (const Tensor* t : in) any = any || requires_grad(*t);
  if (!grad_enabled() || !any) return outs;
  // a Function's name outlives any caller's string
  static std::mutex mu;
  static auto& names = *new std::set<std::string, std::less<>>();  // outlives exit, too
  const char* fn_name;
  {
    std::lock_guard<std::mutex> lock(mu);
    fn_name = names.insert(name).first->c_str();
  }
  struct Type {
    Shape shape;
    DType dtype;
  };
  std::vector<Type> in_types, out_types;
  for (const Tensor& t : inputs) in_types.push_back({t.shape(), t.dtype()});
  for (const Tensor& t : outs) out_types.push_back({t.shape(), t.dtype()});
  // the outputs by node, as an op keeps its result (no cycle through their history)
  std::vector<ir::NodePtr> out_nodes;
  for (const Tensor& t : outs) out_nodes.push_back(trace::node_of(t));
  record_multi(
      outs, fn_name, in,
      [fn_name, backward = std::move(backward), in_types, out_types,
       out_nodes](const std::vector<Tensor>& grads) {
        std::vector<Tensor> g(out_types.size()), o(out_types.size());
        for (size_t i = 0; i < g.size(); ++i) {
          g[i] = i < grads.size() && grads[i].defined()
                     ? grads[i]
                     : zeros_of(out_types[i].shape, out_types[i].dtype);
          o[i] = with_running_history(trace::tensor_of(out_nodes[i]), static_cast<int>(i));
        }
        std::vector<Tensor> r = backward(g, o);
        if (r.size() != in_types.size())
          fail(
              fn_name, "backward returned ", r.size(), " gradients for ", in_types.size(),
              " inputs; return one per input (an undefined tensor, or None, where there is none).");
        for (size_t i = 0; i < r.size(); ++i) {
          if (!r[i].defined()) continue;
          if (r[i].shape() != in_types[i].shape)
            fail(fn_name, "backward's gradient ", i, " has shape ", r[i].shape().str(),
                 " but input ", i, " has shape ", in_types[i].shape.str(),
                 "; return a gradient of the input's shape.");
          if (!is_floating(r[i].dtype()))
            fail(fn_name, "backward's gradient ", i, " is ", r[i].type_str(),
                 "; a gradient must be floating.");
          r[i] = as_dtype(r[i], in_types[i].dtype);
        }
        return r;
      });
  return outs;
}

}  // namespace autograd

Tensor Tensor::detach() const {
  const TensorImpl& impl = checked(*this, "detach");
  auto& self = const_cast<TensorImpl&>(impl);
  if (!impl.pending() && !trace::is_outer(*this))
    return trace::make_materialized(self.materialized(), impl.dtype, impl.shape);
  trace::OpScope scope;
  return trace::make_pending(trace::node_of(*this));
}

}  // namespace lazytrace
