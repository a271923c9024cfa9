// The trace cache behind assume_pure and compile: one traced Body per argument signature
// (LRU-bounded), call recording, the VJP traced once beside the body, the purity check and
// cache-miss explanations.
#include "lazytrace/tools/function_cache.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <unordered_set>

#include "autograd/tape.h"
#include "core/lru_cache.h"
#include "lazytrace/ops/ops.h"
#include "lazytrace/tools/mode_guard.h"
#include "metrics/known.h"
#include "runtime/passes.h"
#include "tools/arguments.h"
#include "tools/traced_body.h"
#include "trace/tensor_impl.h"
#include "trace/trace_context.h"

namespace lazytrace::tools {
namespace {
std::atomic<int64_t> g_live_traces{0};
// compile: a function that computes gradients of its arguments or of outer tensors
// (backward() inside) and neither uses nor returns any of them has thrown them away: they live
// on the tensors' stand-ins, which end with the trace, so the outer tensors' grad() never sees
// them. An error, not a step that silently trains nothing. Returns whether it found gradients (used
// ones).
bool check_no_discarded_grads(const trace::TraceScope& scope,
                              const std::vector<const Tensor*>& args,
                              const std::vector<Tensor>& arg_stand_ins, const ir::Body& body,
                              const std::string& tool, const std::string& name) {
  std::vector<const Tensor*> discarded;
  std::vector<const ir::Node*> grads;
  auto add = [&](const Tensor& outer, const Tensor& stand_in) {
    const Tensor g = stand_in.grad();
    if (g.defined() && g.impl()->node) {
      discarded.push_back(&outer);
      grads.push_back(g.impl()->node.get());
    }
  };
  for (size_t i = 0; i < args.size(); ++i) add(*args[i], arg_stand_ins[i]);
  const std::vector<Tensor>& outer = scope.lifted();
  const std::vector<Tensor>& ph = scope.lifted_placeholders();
  for (size_t i = 0; i < ph.size(); ++i) add(outer[i], ph[i]);
  if (grads.empty()) return false;
  std::unordered_set<const ir::Node*> seen;
  std::vector<const ir::Node*> todo;
  for (const ir::NodePtr& r : body.results) todo.push_back(r.get());
  while (!todo.empty()) {
    const ir::Node* n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n).second) continue;
    for (int k = 0; k < n->num_operands(); ++k) todo.push_back(n->operand(k).get());
  }
  // Where some are used (an optimizer step over some of the parameters, a GAN's generator
  // step that also reaches the discriminator's), the rest were left out on purpose.
  for (const ir::Node* g : grads)
    if (seen.count(g)) return true;
  fail(tool, "'", name, "' runs backward() and leaves gradients of ", grads.size(),
       " tensor(s) from outside it (the first ", discarded[0]->type_str(),
       ") that nothing inside uses or returns: gradients computed inside a compiled function "
       "stay inside it, so their grad() would never change. Run the optimizer step inside the "
       "function too (the whole training step), return the gradients, or call backward() "
       "outside it.");
}

}  // namespace

struct Entry {
  Entry() { g_live_traces.fetch_add(1, std::memory_order_relaxed); }
  ~Entry() { g_live_traces.fetch_sub(1, std::memory_order_relaxed); }
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;

  uint64_t key = 0;
  std::vector<std::string> parts;  // the described signature, for explanations
  std::vector<std::pair<Shape, DType>> leaf_types;
  TraceFn retrace;
  // the autocast state it was traced under (part of the key): its backward, traced later,
  // runs under it too
  bool autocast = false;
  DType autocast_dtype = DType::bfloat16;
  std::shared_ptr<void> result;
  // forward
  std::shared_ptr<const ir::Body> body;
  std::vector<trace::BodyInput> inputs;  // the call's direct operands (direct_inputs)
  std::vector<Tensor> lifted;
  std::vector<Tensor> written;       // outer tensors the function writes (compile): extra outputs
  std::vector<size_t> written_args;  // arguments it writes (compile): extra outputs before those
  // compile: the function runs backward() to gradients of its arguments or of outer tensors;
  // its results then get no gradient of their own (as with writes)
  bool inner_backward = false;
  // compile: the arguments and lifted tensors (leaves) whose backward inside adds to the
  // grad they start with: in eager code their outer .grad, which a compiled call never reads
  std::vector<size_t> adds_to_grad_args, adds_to_grad_lifted;
  uint64_t rng_count = 0;
  std::vector<std::pair<Shape, DType>> out_types;
  // per output: made without gradient history where the function was traced with it
  // (under NoGradGuard inside, or from no input that requires grad), so the call's output
  // does not require grad either, as in eager code (traced with autograd only: trace_once,
  // compile)
  std::vector<char> no_grad_out;
  // A call's Pack: the leaves of its large arguments (explicit leaf packed_leaves[j] at j;
  // pack_pos[i] is leaf i's position, -1 for a direct operand) and then the lifted tensors.
  // It is reused while those leaves have the same nodes, no tensor has been written
  // (trace::write_epoch, for the lifted ones) and calls are recorded in the same trace
  // context; it holds the last call's packed nodes until the next call.
  std::vector<int> pack_pos;
  std::vector<size_t> packed_leaves;
  std::mutex pack_mu;
  ir::NodePtr pack;
  uint64_t pack_epoch = 0;
  uint32_t pack_context = 0;
  // backward, traced on first use: gradients of every floating input (explicit leaves, then
  // lifted tensors), with one cotangent input per floating output
  std::shared_ptr<const ir::Body> vjp;
  std::vector<trace::BodyInput> vjp_inputs;  // its call's direct operands
  std::vector<int> vjp_grad_of;       // input position (explicit, then lifted) of each output
  std::vector<int> explicit_operand;  // the operand of a call that is explicit leaf i (-1: packed)
  std::string vjp_error;              // trace_once: why the VJP could not be traced
  // The tape edges of the last differentiated call, where all are leaves' (a model's
  // weights): a call with the same tensors shares them, with nothing counted or copied per
  // argument.
  std::mutex edges_mu;
  autograd::SharedEdges edges;
};

namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

}  // namespace

size_t trace_cache_capacity() {
  const char* v = std::getenv("LAZYTRACE_TRACE_CACHE_SIZE");
  const long n = v ? std::atol(v) : 0;
  return n > 0 ? static_cast<size_t>(n) : 256;
}

namespace {

std::vector<std::pair<Shape, DType>> types_of(const std::vector<Tensor>& ts) {
  std::vector<std::pair<Shape, DType>> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.emplace_back(t.shape(), t.dtype());
  return out;
}

// The call's direct operands in the body's Param order (lifted tensors go in the Pack);
// explicit(i) is the node of explicit leaf i, extras the cotangent inputs (the VJP's).
template <typename Explicit>
std::vector<ir::NodePtr> operands(const std::vector<trace::BodyInput>& inputs,
                                  const Explicit& explicit_node,
                                  const std::pair<ir::NodePtr, ir::NodePtr>& rng,
                                  const std::vector<Tensor>& extras) {
  return body_operands(
      inputs, explicit_node, [](size_t) { return ir::NodePtr(); },
      [&](size_t i) { return trace::node_of(extras[i]); }, rng);
}

// An argument with at least this many leaves is passed in the call's Pack.
constexpr size_t kPackedArgumentLeaves = 16;

// Packs the leaves of `flat`'s large arguments: e.pack_pos and e.packed_leaves.
void choose_packed(Entry& e, const pytree::Flat& flat) {
  if (!runtime::current_passes().on(runtime::Pass::PackArguments)) return;
  size_t begin = 0;
  for (uint32_t end : flat.arg_ends) {
    if (end - begin >= kPackedArgumentLeaves) {
      e.pack_pos.resize(flat.leaves.size(), -1);
      for (size_t i = begin; i < end; ++i) {
        e.pack_pos[i] = static_cast<int>(e.packed_leaves.size());
        e.packed_leaves.push_back(i);
      }
    }
    begin = end;
  }
}

bool has_pack(const Entry& e) {
  return !e.packed_leaves.empty() || !e.lifted.empty();
}

// The inputs a call of a body passes as direct operands: all but the lifted and packed ones.
std::vector<trace::BodyInput> direct_inputs(const std::vector<trace::BodyInput>& inputs,
                                            const std::vector<int>& pack_pos) {
  std::vector<trace::BodyInput> out;
  for (const trace::BodyInput& in : inputs) {
    if (in.kind == trace::BodyInput::Lifted) continue;
    if (in.kind == trace::BodyInput::Explicit && !pack_pos.empty() &&
        pack_pos[static_cast<size_t>(in.index)] >= 0)
      continue;
    out.push_back(in);
  }
  return out;
}

// Whether `leaves` are of e's leaf types (else a hash collision: retrace), and in `pack`
// e's Pack where this call can reuse it: its lifted tensors may not have new values and its
// packed leaves have the same nodes (so the same types: they are not compared again).
bool matches(Entry& e, const pytree::Flat& flat, ir::NodePtr& pack) {
  const std::vector<const Tensor*>& leaves = flat.leaves;
  if (e.leaf_types.size() != leaves.size()) return false;
  const pytree::LeafState* states = flat.has_states() ? flat.states.data() : nullptr;
  const uint32_t context = trace::current_context_id();
  {
    std::lock_guard<std::mutex> lock(e.pack_mu);
    if (e.pack && e.pack_context == context &&
        (e.lifted.empty() || e.pack_epoch == trace::write_epoch()))
      pack = e.pack;
  }
  for (size_t i = 0; i < leaves.size(); ++i) {
    const int j = e.pack_pos.empty() ? -1 : e.pack_pos[i];
    if (j >= 0 && pack) {
      const void* node = states ? states[i].node : nullptr;
      if (!node) {
        const TensorImpl& impl = *leaves[i]->impl();
        node = impl.context == context ? impl.node.get() : trace::node_of(*leaves[i]).get();
      }
      if (node == pack->operand(j).get()) continue;
      pack = nullptr;
    }
    if (e.leaf_types[i].first != leaves[i]->shape() || e.leaf_types[i].second != leaves[i]->dtype())
      return false;
  }
  return true;
}

// A call's inputs: its leaves, then its lifted tensors.
std::vector<const Tensor*> inputs_of(std::span<const Tensor* const> leaves,
                                     const std::vector<Tensor>& lifted) {
  std::vector<const Tensor*> inputs(leaves.size() + lifted.size());
  std::copy(leaves.begin(), leaves.end(), inputs.begin());
  for (size_t k = 0; k < lifted.size(); ++k) inputs[leaves.size() + k] = &lifted[k];
  return inputs;
}

// autograd::same_edges for a call's inputs, its leaves from their states where the
// flattening read them.
bool same_edges(const std::vector<autograd::Edge>& edges, const pytree::Flat& flat,
                const std::vector<Tensor>& lifted) {
  const size_t n = flat.leaves.size();
  if (edges.size() != n + lifted.size()) return false;
  if (!flat.has_states()) return autograd::same_edges(edges, inputs_of(flat.leaves, lifted));
  for (size_t i = 0; i < n; ++i) {
    const pytree::LeafState& s = flat.states[i];
    const autograd::Edge& e = edges[i];
    if (s.kind == 2 || (s.kind == 1 ? e.target() != s.grad : e.defined())) return false;
  }
  return lifted.empty() || autograd::same_edges(std::span(edges).subspan(n), inputs_of({}, lifted));
}

// A new Pack for a call of e with these explicit leaves, kept for the calls after it.
ir::NodePtr new_pack(Entry& e, const std::vector<const Tensor*>& leaves) {
  std::vector<ir::NodePtr> nodes;
  nodes.reserve(e.packed_leaves.size() + e.lifted.size());
  for (size_t i : e.packed_leaves) nodes.push_back(trace::node_of(*leaves[i]));
  for (const Tensor& t : e.lifted) nodes.push_back(trace::node_of(t));
  metrics::call_pack_built.add();
  ir::NodePtr pack = ir::make_pack(std::move(nodes));
  std::lock_guard<std::mutex> lock(e.pack_mu);
  e.pack = pack;
  e.pack_epoch = trace::write_epoch();
  e.pack_context = trace::current_context_id();
  return pack;
}

// A call of `body`. A differentiated call and its VJP call are inlined where compiled: the
// VJP recomputes the forward, and inlined, the compiler merges that with the forward call.
std::vector<Tensor> call_body(const std::shared_ptr<const ir::Body>& body,
                              std::vector<ir::NodePtr> ops, ir::NodePtr pack, bool inline_call) {
  trace::OpScope scope;
  std::vector<Tensor> outs;
  for (ir::NodePtr& n : ir::make_call(body, std::move(ops), std::move(pack), inline_call))
    outs.push_back(trace::make_pending(std::move(n)));
  return outs;
}

// A node as the purity check compares and names it: its op, type and attributes, and for a
// number its value where it is a literal (0, 1 and -1 stay in the graph) or that it is a
// parameter (whose value is compared after, with its own message).
std::string node_text(const ir::GNode& n) {
  std::string s = ir::op_name(n.op);
  s.append(" ").append(dtype_short(n.dtype)).append(n.shape.str());
  if (n.op == ir::OpKind::Scalar) {
    s += n.scalar_is_param ? " (a parameter)" : lazytrace::detail::cat(" = ", n.value);
  } else if (n.attrs.n > 0) {
    s += " {";
    for (int i = 0; i < n.attrs.n; ++i) s += lazytrace::detail::cat(i ? "," : "", n.attrs[i]);
    s += n.attrs.flag ? ", keepdim}" : "}";
  }
  return s;
}

}  // namespace

class FunctionCache {
 public:
  explicit FunctionCache(CacheOptions o)
      : options(std::move(o)), check_purity(env_flag("LAZYTRACE_CHECK_PURITY")) {}

  CacheOptions options;
  bool check_purity;  // read when the function is made, not per call
  std::mutex mu;
  LruCache<std::shared_ptr<Entry>> entries{trace_cache_capacity()};
  // the most recent signatures traced (for explanations), and how many were ever traced
  std::vector<std::vector<std::string>> seen;
  int traced = 0;
  ModeGuard modes;  // the train()/eval() flags its function was seen to read

  const char* tool() const { return options.tool; }

  std::shared_ptr<Entry> find(uint64_t key) {
    std::lock_guard<std::mutex> lock(mu);
    std::shared_ptr<Entry>* e = entries.find(key);
    return e ? *e : nullptr;
  }

  void insert(std::shared_ptr<Entry> e) {
    std::lock_guard<std::mutex> lock(mu);
    const uint64_t key = e->key;
    entries.insert(key, std::move(e));
  }

  // Why `parts` missed: a new function, or what differs from the closest signature seen.
  std::string explain(const std::vector<std::string>& parts) const {
    if (seen.empty()) return "the function has not been traced before";
    size_t best = 0, best_score = 0;
    for (size_t i = 0; i < seen.size(); ++i) {
      size_t score = 0;
      for (size_t k = 0; k < std::min(seen[i].size(), parts.size()); ++k)
        score += seen[i][k] == parts[k];
      if (score >= best_score) {
        best = i;
        best_score = score;
      }
    }
    const auto& near = seen[best];
    for (size_t k = 0; k < std::max(near.size(), parts.size()); ++k) {
      if (k >= parts.size()) return "missing " + near[k] + " (the closest signature has it)";
      if (k >= near.size()) return "got " + parts[k] + ", which the closest signature lacks";
      if (near[k] != parts[k]) {
        // "argument 0: f32[5]" vs "argument 0: f32[10]" -> "got f32[5] at argument 0, ..."
        const size_t c1 = parts[k].find(": "), c2 = near[k].find(": ");
        if (c1 != std::string::npos && c2 != std::string::npos &&
            parts[k].compare(0, c1, near[k], 0, c2) == 0)
          return "got " + parts[k].substr(c1 + 2) + " at " + parts[k].substr(0, c1) +
                 ", expected " + near[k].substr(c2 + 2);
        return "got " + parts[k] + ", expected " + near[k];
      }
    }
    return "the signature is the same as a traced one that was evicted from the cache";
  }
};

int64_t live_traces() {
  return g_live_traces.load(std::memory_order_relaxed);
}

std::shared_ptr<FunctionCache> make_function_cache(CacheOptions options) {
  return std::make_shared<FunctionCache>(std::move(options));
}

namespace {

// The VJP body of `e` in `scope`, where the function ran on `ph` (placeholders that require
// grad) and gave `traced`: the gradients of its floating outputs (given as cotangent inputs)
// with respect to every floating input.
void finish_vjp(Entry& e, trace::TraceScope& scope, const std::vector<Tensor>& ph,
                const Traced& traced, const char* tool, const std::string& name) {
  JointVjp vjp = joint_vjp(scope, ph, traced.outputs, e.lifted, tool, "'" + name + "'");
  e.vjp_grad_of = std::move(vjp.grad_of);
  e.vjp = scope.finish(vjp.grads, name + "_backward", e.pack_pos);
  e.vjp_inputs = direct_inputs(scope.inputs(), e.pack_pos);
}

// Traces the VJP of `e` once: the function again on placeholders that require grad.
void trace_vjp(Entry& e, const char* tool, const std::string& name) {
  if (!e.vjp_error.empty()) throw Error(e.vjp_error);
  metrics::assume_pure_backward_trace.add();
  trace::TraceScope scope(std::string(tool) + " (backward)");
  scope.set_lift_grad(trace::TraceScope::LiftGrad::all);
  EnableGradGuard grad_on;
  AutocastGuard autocast(e.autocast, e.autocast_dtype);
  std::vector<Tensor> ph;
  for (const auto& [shape, dtype] : e.leaf_types) ph.push_back(scope.input(shape, dtype, true));
  scope.lift_first(e.lifted);
  Traced traced = e.retrace(own_handles(ph));
  finish_vjp(e, scope, ph, traced, tool, name);
}

// compile's stand-ins for its arguments: each requires grad as its argument does, a leaf
// where the argument is one (a backward inside fills its grad(), and writing into it is the
// error it is outside) and a clone otherwise (written in place as the argument could be)
std::vector<Tensor> compile_stand_ins(trace::TraceScope& scope,
                                      const std::vector<const Tensor*>& leaves,
                                      const std::vector<char>& grad_kinds) {
  std::vector<Tensor> ph;
  for (size_t i = 0; i < leaves.size(); ++i) {
    Tensor t = scope.input(leaves[i]->shape(), leaves[i]->dtype(), grad_kinds[i] != 0);
    ph.push_back(grad_kinds[i] == 2 ? clone(t) : t);
  }
  return ph;
}

}  // namespace

CachedCall::CachedCall(FunctionCache& cache, pytree::Flat flat, DescribeFn describe)
    : cache_(cache),
      flat_(std::move(flat)),
      key_(keyed_by_thread_state(flat_.hash())),
      describe_(describe) {
  key_ = key_with_modes(key_, cache_.modes);
  if (cache_.options.functional_writes && autograd::grad_enabled()) {
    bool any = false;
    const pytree::LeafState* states = flat_.has_states() ? flat_.states.data() : nullptr;
    for (size_t i = 0; i < flat_.leaves.size(); ++i) {
      const Tensor* t = flat_.leaves[i];
      const char kind = states                ? static_cast<char>(states[i].kind)
                        : !t->requires_grad() ? 0
                        : t->is_leaf()        ? 1
                                              : 2;
      grad_kinds_.push_back(kind);
      any = any || kind != 0;
    }
    if (any) {  // the kinds (0, 1 or 2) two bits each, 32 to a word: one mix per 32 leaves
      pytree::Flat k;
      k.mix(key_);
      uint64_t word = 0;
      for (size_t i = 0; i < grad_kinds_.size(); ++i) {
        word |= static_cast<uint64_t>(grad_kinds_[i]) << (2 * (i % 32));
        if (i % 32 == 31 || i + 1 == grad_kinds_.size()) {
          k.mix(word);
          word = 0;
        }
      }
      key_ = k.hash();
    }
  }
  grad_kinds_.resize(flat_.leaves.size(), 0);
  entry_ = cache_.find(key_);
  if (entry_ && !matches(*entry_, flat_, pack_)) entry_ = nullptr;
  if (entry_) {
    (cache_.options.count_as_compile ? metrics::compiled_hit : metrics::assume_pure_hit).add();
    if (cache_.check_purity) {
      // retrace and compare: an impure function gives a different graph
      trace::TraceScope scope(cache_.tool());
      std::vector<Tensor> ph = compile_stand_ins(scope, flat_.leaves, grad_kinds_);
      Traced again = entry_->retrace(ph);
      auto body = scope.finish(again.outputs, cache_.options.name);
      if (body->hash != entry_->body->hash) {
        const auto &a = entry_->body->graph.nodes, &b = body->graph.nodes;
        size_t i = 0;
        while (i < a.size() && i < b.size() && node_text(a[i]) == node_text(b[i]) &&
               a[i].inputs == b[i].inputs)
          ++i;
        std::string where = i < a.size() && i < b.size()
                                ? "node %" + std::to_string(i) + " is " + node_text(b[i]) +
                                      ", was " + node_text(a[i])
                                : "the graphs have " + std::to_string(b.size()) + " and " +
                                      std::to_string(a.size()) + " nodes";
        fail(cache_.tool(), "'", cache_.options.name,
             "' is not pure: tracing it again with the same signature gave a different graph (",
             where, "). Make it depend only on its arguments: pass changing values as tensors.");
      }
      // the graph's hash leaves out its numbers (a new number never recompiles): a host
      // number the function reads (a global, a captured variable) shows here
      const std::vector<ir::Node*>&was = entry_->body->scalars, &now = body->scalars;
      for (size_t i = 0; i < was.size() && i < now.size(); ++i)
        if (was[i]->value != now[i]->value || was[i]->ivalue != now[i]->ivalue)
          fail(cache_.tool(), "'", cache_.options.name,
               "' is not pure: tracing it again with the same signature gave the number ",
               now[i]->value, " where the first trace had ", was[i]->value,
               ": it reads a host value that changed (a global, a captured variable). Pass "
               "changing values as tensors (lt::scalar(v)), or as static arguments.");
      // ... and the values of a tensor it makes from host data (lt::tensor(v))
      const std::vector<ir::Node*>&had = entry_->body->data, &has = body->data;
      for (size_t i = 0; i < had.size() && i < has.size(); ++i)
        if (!trace::same_data(*had[i], *has[i]))
          fail(cache_.tool(), "'", cache_.options.name,
               "' is not pure: tracing it again with the same signature made a tensor from host "
               "data (lt::tensor, a ",
               dtype_name(has[i]->dtype), has[i]->shape.str(),
               ") with other values than the first trace's: it reads host data that changed. "
               "Pass changing values as tensor arguments.");
    }
  }
}

void CachedCall::trace(TraceFn fn) {
  FunctionCache& c = cache_;
  (c.options.count_as_compile ? metrics::compiled_trace : metrics::assume_pure_trace).add();
  pytree::Flat described = describe_();
  if (!c.modes.empty())  // for explanations: the modes are part of the key
    described.parts.push_back(c.modes.flipped() == 0
                                  ? "train()/eval() modes: as at the first trace"
                                  : "train()/eval() modes: some changed since the first trace");
  if (is_autocast_enabled())  // for explanations: autocast is part of the key
    described.parts.push_back(std::string("autocast: ") + dtype_name(autocast_dtype()));
  const bool explain = env_flag("LAZYTRACE_EXPLAIN_CACHE_MISSES");
  std::string why;
  if (explain || c.options.max_different_graphs > 0) {
    std::lock_guard<std::mutex> lock(c.mu);
    why = c.explain(described.parts);
    if (c.options.max_different_graphs > 0 && c.traced >= c.options.max_different_graphs)
      fail(c.tool(), "'", c.options.name, "' would produce graph ", c.traced + 1,
           " but max_different_graphs is ", c.options.max_different_graphs, ": ", why,
           ". Keep shapes, dtypes and static arguments fixed between calls, or raise the "
           "limit.");
  }
  if (explain)
    std::fprintf(stderr, "[%s] cache miss for '%s': %s\n", c.tool(), c.options.name.c_str(),
                 why.c_str());

  auto e = std::make_shared<Entry>();
  e->key = key_;
  e->parts = std::move(described.parts);
  for (const Tensor* t : flat_.leaves) e->leaf_types.emplace_back(t->shape(), t->dtype());
  e->retrace = std::move(fn);
  e->autocast = is_autocast_enabled();
  e->autocast_dtype = autocast_dtype();
  choose_packed(*e, flat_);
  {
    trace::TraceScope scope(c.tool());
    ModeRecording modes(c.modes);
    // assume_pure's forward body needs no tape (its VJP is traced separately, or with
    // trace_once from this run); compile's function may run backward itself, on stand-ins
    // that require grad as their tensors do
    const bool with_vjp = c.options.trace_once && !c.options.functional_writes;
    std::optional<NoGradGuard> no_grad;
    std::optional<EnableGradGuard> grad_on;
    if (c.options.functional_writes) {
      scope.allow_writes();
      scope.set_lift_grad(trace::TraceScope::LiftGrad::same);
    } else if (with_vjp) {
      scope.set_lift_grad(trace::TraceScope::LiftGrad::all);
      grad_on.emplace();
    } else {
      no_grad.emplace();
    }
    std::vector<Tensor> ph;
    if (c.options.functional_writes) {
      ph = compile_stand_ins(scope, flat_.leaves, grad_kinds_);
    } else {
      for (const Tensor* t : flat_.leaves)
        ph.push_back(scope.input(t->shape(), t->dtype(), with_vjp));
    }
    const std::vector<Tensor> args = with_vjp ? own_handles(ph) : ph;
    std::vector<ir::NodePtr> given;
    for (const Tensor& a : args) given.push_back(a.impl()->node);
    Traced traced = e->retrace(args);
    e->out_types = types_of(traced.outputs);
    if (with_vjp || (c.options.functional_writes && autograd::grad_enabled()))
      for (const Tensor& y : traced.outputs) e->no_grad_out.push_back(!y.requires_grad());
    // compile: arguments the function wrote into (copy_, an in-place op) are written back
    // after each call, as the lifted tensors it wrote are; assume_pure refuses such a write,
    // which the caller's tensor would not see
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i].impl()->node == given[i]) continue;
      if (!c.options.functional_writes)
        fail(c.tool(), "'", c.options.name, "' writes in place into its tensor argument ", i, " (",
             args[i].type_str(),
             ", counting its arguments' tensors in order); the "
             "caller's tensor would not see the write, and a pure function makes none. Return "
             "the new value instead (y = x + 1, not x += 1), or use compile, which writes its "
             "arguments back.");
      e->written_args.push_back(i);
      traced.outputs.push_back(args[i]);
    }
    e->body = scope.finish(traced.outputs, c.options.name, e->pack_pos);
    if (c.options.functional_writes) {
      e->inner_backward =
          check_no_discarded_grads(scope, flat_.leaves, args, *e->body, c.tool(), c.options.name);
      for (size_t i = 0; i < args.size(); ++i)
        if (autograd::added_to_initial_grad(args[i])) e->adds_to_grad_args.push_back(i);
      const std::vector<Tensor>& stand_ins = scope.lifted_placeholders();
      for (size_t i = 0; i < stand_ins.size(); ++i)
        if (autograd::added_to_initial_grad(stand_ins[i])) e->adds_to_grad_lifted.push_back(i);
    }
    e->inputs = direct_inputs(scope.inputs(), e->pack_pos);
    e->explicit_operand.assign(flat_.leaves.size(), -1);
    for (size_t k = 0; k < e->inputs.size(); ++k)
      if (e->inputs[k].kind == trace::BodyInput::Explicit)
        e->explicit_operand[static_cast<size_t>(e->inputs[k].index)] = static_cast<int>(k);
    e->lifted = scope.lifted();
    e->written = scope.written();
    e->rng_count = scope.rng_count();
    if (with_vjp) {
      metrics::assume_pure_backward_trace.add();
      try {
        finish_vjp(*e, scope, ph, traced, c.tool(), c.options.name);
      } catch (const Error& err) {
        e->vjp_error = err.what();  // a forward-only function (a while_loop) still runs
      }
    }
    e->result = std::move(traced.result);
  }
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.seen.push_back(e->parts);
    if (c.seen.size() > 256) c.seen.erase(c.seen.begin());
    ++c.traced;
  }
  c.insert(e);
  entry_ = std::move(e);
}

const void* CachedCall::result() const {
  return entry_->result.get();
}

std::vector<Tensor> CachedCall::record() {
  std::shared_ptr<Entry> e = entry_;
  // a backward inside that eager code would add to a .grad set outside: refused, not wrong
  auto refuse = [&](const Tensor& t) {
    fail(cache_.tool(), "'", cache_.options.name, "' runs backward() into a ", t.type_str(),
         " tensor whose .grad is already set outside it: eager code would add to that .grad, "
         "but a compiled function's backward starts from none (and never writes .grad "
         "outside). Clear the gradients before the call (optimizer.zero_grad(); for one tensor "
         "t.set_grad(lt::Tensor()) in C++, t.grad = None in Python), or inside the function "
         "before backward().");
  };
  for (size_t i : e->adds_to_grad_args)
    if (flat_.leaves[i]->grad().defined()) refuse(*flat_.leaves[i]);
  for (size_t i : e->adds_to_grad_lifted)
    if (e->lifted[i].grad().defined()) refuse(e->lifted[i]);
  std::pair<ir::NodePtr, ir::NodePtr> rng;
  if (e->rng_count > 0) rng = trace::random_operands(e->rng_count);
  // Differentiated where an input requires grad. The edges of the last differentiated call,
  // where they are still this call's, say so at once: they exist only where one does.
  bool differentiated = false;
  std::vector<const Tensor*> inputs;  // explicit leaves, then lifted tensors (new edges only)
  autograd::SharedEdges edges;
  const bool writes = !e->written.empty() || !e->written_args.empty();
  if (autograd::grad_enabled() && !writes && !e->inner_backward) {
    {
      std::lock_guard<std::mutex> lock(e->edges_mu);
      edges = e->edges;
    }
    if (edges && same_edges(*edges, flat_, e->lifted)) {
      differentiated = true;
    } else {
      edges = nullptr;
      inputs = inputs_of(flat_.leaves, e->lifted);
      for (const Tensor* t : inputs) differentiated = differentiated || autograd::requires_grad(*t);
    }
  }
  const std::vector<const Tensor*>& leaves = flat_.leaves;
  if (!pack_ && has_pack(*e)) pack_ = new_pack(*e, leaves);
  std::vector<Tensor> outs = call_body(
      e->body, operands(e->inputs, [&](size_t i) { return trace::node_of(*leaves[i]); }, rng, {}),
      std::move(pack_), differentiated);
  if (writes) {  // write back what the function wrote (an optimizer step, an argument)
    NoGradGuard no_grad;
    size_t at = e->out_types.size();
    for (size_t i : e->written_args) {
      Tensor target = *leaves[i];
      target.copy_(outs[at++]);
    }
    for (const Tensor& t : e->written) {
      Tensor target = t;
      target.copy_(outs[at++]);
    }
    outs.resize(e->out_types.size());
    return outs;  // a function with side effects is not differentiated from outside
  }
  if (!differentiated || outs.empty()) return outs;
  const char* tool = cache_.tool();
  std::string name = cache_.options.name;
  // The backward reads the call's own operands: the values the forward call had, even where
  // a tensor passed to it (or lifted) has been given a new value since.
  ir::NodePtr call = trace::node_of(outs.front())->operand(0);
  if (!edges) {
    edges = autograd::leaf_edges_of(inputs);
    std::lock_guard<std::mutex> lock(e->edges_mu);
    e->edges = edges;
  }
  auto vjp = [e, call, rng, tool, name](const std::vector<Tensor>& grads) {
    if (autograd::grad_enabled())  // the engine enables grad for create_graph only
      fail(tool, "higher-order gradients (create_graph) through '", name,
           "' are not supported: the gradient of a call records no gradient of its own. "
           "Take first-order gradients through it, or call the function's ops directly for "
           "higher orders.");
    if (!e->vjp) trace_vjp(*e, tool, name);
    std::vector<Tensor> cots;  // one per floating output; zeros where none arrived
    for (size_t k = 0; k < e->out_types.size(); ++k) {
      const auto& [shape, dtype] = e->out_types[k];
      if (!is_floating(dtype)) continue;
      cots.push_back(k < grads.size() && grads[k].defined() ? grads[k] : zeros(shape, dtype));
    }
    std::vector<ir::NodePtr> ops = operands(
        e->vjp_inputs, [&](size_t i) { return call->operand(e->explicit_operand[i]); }, rng, cots);
    // the backward body packs the same arguments and lifts the same tensors in the same
    // order (finish_vjp checks): the forward call's Pack, its last operand
    ir::NodePtr pack = has_pack(*e) ? call->operand(call->num_operands() - 1) : nullptr;
    std::vector<Tensor> g = call_body(e->vjp, std::move(ops), pack, /*inline_call=*/true);
    std::vector<Tensor> out(e->leaf_types.size() + e->lifted.size());
    for (size_t j = 0; j < g.size(); ++j) out[static_cast<size_t>(e->vjp_grad_of[j])] = g[j];
    return out;
  };
  if (edges)
    autograd::record_multi(outs, tool, std::move(edges), std::move(vjp));
  else
    autograd::record_multi(outs, tool, inputs, std::move(vjp));
  for (size_t k = 0; k < e->no_grad_out.size() && k < outs.size(); ++k)
    if (e->no_grad_out[k]) outs[k] = outs[k].detach();
  return outs;
}

}  // namespace lazytrace::tools
