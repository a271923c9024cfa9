// scan: the body traced once (per signature with is_fn_pure), recorded as one Loop node;
// its gradient a reverse scan over the body's VJP, traced once beside it. With
// Remat::save the forward loop also returns, stacked, every value the VJP reads from the
// forward (ir::partition); with Remat::recompute only the carries, and the backward
// body recomputes the forward from them.
#include "lazytrace/tools/scan.h"

#include <mutex>
#include <optional>
#include <string_view>

#include "autograd/tape.h"
#include "core/lru_cache.h"
#include "ir/partition.h"
#include "lazytrace/autograd/autograd.h"
#include "lazytrace/ops/ops.h"
#include "lazytrace/tools/function_cache.h"
#include "lazytrace/tools/mode_guard.h"
#include "metrics/known.h"
#include "runtime/passes.h"
#include "tools/arguments.h"
#include "tools/loops.h"
#include "tools/traced_body.h"

namespace lazytrace::tools {

using Types = std::vector<std::pair<Shape, DType>>;

namespace {

Types types_of(const std::vector<Tensor>& ts) {
  Types out;
  for (const Tensor& t : ts) out.emplace_back(t.shape(), t.dtype());
  return out;
}
Types types_of(const std::vector<const Tensor*>& ts) {
  Types out;
  for (const Tensor* t : ts) out.emplace_back(t->shape(), t->dtype());
  return out;
}
std::vector<int> floating(const Types& ts) {
  std::vector<int> out;
  for (size_t i = 0; i < ts.size(); ++i)
    if (is_floating(ts[i].second)) out.push_back(static_cast<int>(i));
  return out;
}
std::vector<Tensor> placeholders(trace::TraceScope& s, const Types& ts, bool grad = false) {
  std::vector<Tensor> out;
  for (const auto& [shape, dtype] : ts) out.push_back(s.input(shape, dtype, grad));
  return out;
}
std::vector<ir::NodePtr> nodes_of(const std::vector<Tensor>& ts) {
  std::vector<ir::NodePtr> out;
  for (const Tensor& t : ts) out.push_back(trace::node_of(t));
  return out;
}

// The differentiated form of a traced body, for one remat policy.
struct Diff {
  // The forward loop's body: the joint trace's inputs -> carries, ys, then the saved values
  // (the carries the backward reads, then residuals), stacked by the loop.
  std::shared_ptr<const ir::Body> forward;
  std::vector<trace::BodyInput> forward_inputs;
  int num_saved = 0;
  // The backward loop's body: carries (cotangents of the floating carries, then gradient
  // sums of the floating consts and lifted tensors); x slices (saved values, xs,
  // cotangents of the floating ys); consts -> the next carries, then the xs' gradients.
  std::shared_ptr<const ir::Body> backward;
  std::vector<trace::BodyInput> backward_inputs;
  std::vector<Tensor> backward_lifted;
  int backward_carries = 0, backward_xs = 0;
  // Per floating x: its gradient leaves the backward loop as two factors (see
  // low_rank_product), multiplied after the loop for every iteration at once.
  std::vector<char> factored;
};

bool is_transpose(const ir::Node& n) {
  return ir::is_matrix_transpose(n.op, n.attrs);
}

// A gradient that is a product Fᵀ G of two thin factors, F [t, p] and G [t, q]: a weight's
// gradient xᵀ dy over t tokens, or (dyᵀ x)ᵀ as the transpose's VJP writes it. A scan then
// stacks the factors, t (p + q) values an iteration, instead of the p q of the product,
// and one batched product after the loop makes them every iteration's gradient: the step
// that consumes the gradients (an optimizer) gets them as one product it can fuse with.
bool low_rank_product(const ir::NodePtr& n, ir::NodePtr& f, ir::NodePtr& g) {
  const bool outer = is_transpose(*n);
  const ir::Node& m = outer ? *n->operand(0) : *n;
  if (m.op != ir::OpKind::Matmul || m.shape.size() != 2 || !is_transpose(*m.operand(0)))
    return false;
  const ir::NodePtr& a = m.operand(0)->operand(0);  // m = aᵀ b
  const ir::NodePtr& b = m.operand(1);
  if (a->shape.size() != 2 || b->shape.size() != 2 || a->dtype != n->dtype || b->dtype != n->dtype)
    return false;
  f = outer ? b : a;  // n = fᵀ g
  g = outer ? a : b;
  const int64_t t = f->shape[0], p = f->shape[1], q = g->shape[1];
  return 2 * t * (p + q) <= p * q;
}

struct ScanEntry {
  LoopTraceFn retrace;
  std::shared_ptr<void> ys_like;
  std::shared_ptr<const ir::Body> body;  // carries, x slices, consts -> carries, ys
  std::vector<trace::BodyInput> inputs;
  std::vector<Tensor> lifted;
  uint64_t rng_count = 0;
  Types carry, x, consts, ys;              // x: one slice
  std::mutex mu;                           // guards diff
  std::shared_ptr<const Diff> diff[2][2];  // [remat: save, recompute][xs' gradients factored]
};

struct Cache {
  std::mutex mu;
  LruCache<std::shared_ptr<ScanEntry>> entries{trace_cache_capacity()};
  // per function and signature (is_fn_pure), the train()/eval() flags it was seen to read
  LruCache<std::shared_ptr<ModeGuard>> modes{trace_cache_capacity()};
};
Cache& cache() {
  static auto* c = new Cache();
  return *c;
}

std::shared_ptr<ScanEntry> find(uint64_t key, const Types& carry, const Types& x, const Types& k) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  std::shared_ptr<ScanEntry>* e = c.entries.find(key);
  if (!e || (*e)->carry != carry || (*e)->x != x || (*e)->consts != k)
    return nullptr;  // absent, or a hash collision
  return *e;
}

void insert(uint64_t key, std::shared_ptr<ScanEntry> e) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.entries.insert(key, std::move(e));
}

std::shared_ptr<ScanEntry> new_entry(const LoopTraceFn& fn, Types carry, Types x, Types k) {
  auto e = std::make_shared<ScanEntry>();
  e->retrace = fn;
  e->carry = std::move(carry);
  e->x = std::move(x);
  e->consts = std::move(k);
  return e;
}

// The body and what it returns, from a trace of fn in `scope` that gave `t`.
void set_body(ScanEntry& e, trace::TraceScope& scope, LoopTraced& t, const char* tool) {
  std::vector<Tensor> outs = t.carry;
  outs.insert(outs.end(), t.ys.begin(), t.ys.end());
  e.body = scope.finish(outs, tool);
  e.inputs = scope.inputs();
  e.lifted = scope.lifted();
  e.rng_count = scope.rng_count();
  e.ys = types_of(t.ys);
  e.ys_like = std::move(t.ys_like);
}

std::shared_ptr<ScanEntry> trace_body(const char* tool, const LoopTraceFn& fn, Types carry, Types x,
                                      Types k) {
  metrics::loop_trace.add();
  auto e = new_entry(fn, std::move(carry), std::move(x), std::move(k));
  trace::TraceScope scope(tool);
  // The body runs in the caller's grad mode, a closed-over tensor requiring grad as outside,
  // so that a gradient taken inside (of a local leaf, or of such a tensor) works as in eager
  // code. The loop's own VJP is traced separately (make_diff).
  if (autograd::grad_enabled()) scope.set_lift_grad(trace::TraceScope::LiftGrad::same);
  std::vector<Tensor> c = placeholders(scope, e->carry), xs = placeholders(scope, e->x),
                      ks = placeholders(scope, e->consts);
  const std::vector<ir::NodePtr> given = nodes_of(xs);
  LoopTraced t = e->retrace(c, xs, ks);
  // a write into an element of xs (x += 1) would reach neither xs nor a later iteration
  for (size_t i = 0; i < xs.size(); ++i)
    if (xs[i].impl()->node != given[i])
      fail(tool, "the body writes in place into its x (", xs[i].type_str(), ", leaf ", i,
           " of an element of xs",
           std::string_view(tool) == "scan_layers" ? ": a layer's parameter or buffer" : "",
           "); the write would reach neither xs nor a later iteration. Compute a new tensor "
           "instead (y = x + 1, not x += 1), or carry the value through the carry.");
  set_body(*e, scope, t, tool);
  return e;
}

// The steps of make_diff (below) after the joint trace (1): 2 to 4 run in its scope, on what
// it gave, and 5 after it.

// 2. What the backward reads from the forward: with Remat::save the gradients are split at
// the forward values they read (the residuals, which the forward loop stacks); with
// Remat::recompute nothing is split, and the backward recomputes the forward.
ir::Partition split_residuals(const std::vector<Tensor>& grads,
                              const std::vector<trace::BodyInput>& joint, Remat remat) {
  const std::vector<ir::NodePtr> roots = nodes_of(grads);
  if (remat != Remat::save) {
    ir::Partition part;
    part.roots = roots;
    return part;
  }
  return ir::partition(
      roots,
      [&](const ir::Node& n) {
        return n.op == ir::OpKind::Param &&
               joint[static_cast<size_t>(n.attrs[0])].kind == trace::BodyInput::Extra;
      },
      static_cast<int>(joint.size()));
}

// 3. The forward loop's body (d.forward, see Diff), where the body ran on carries `c` and
// gave `t`. Returns the joint Param of each saved carry.
std::vector<int> forward_body(Diff& d, const std::vector<trace::BodyInput>& joint,
                              const ir::Partition& part, const std::vector<Tensor>& c,
                              const LoopTraced& t, const std::string& tool) {
  const int nj = static_cast<int>(joint.size()), nc = static_cast<int>(c.size());
  // the carries the backward reads are saved too (stacked by the forward loop)
  std::vector<ir::Node*> raw;
  for (const ir::NodePtr& r : part.roots) raw.push_back(r.get());
  std::vector<char> reads(static_cast<size_t>(nj), 0);
  for (ir::Node* n : ir::walk(raw).order)
    if (n->op == ir::OpKind::Param && n->attrs[0] < nj) reads[static_cast<size_t>(n->attrs[0])] = 1;
  std::vector<ir::NodePtr> fwd = nodes_of(t.carry);
  for (const ir::NodePtr& n : nodes_of(t.ys)) fwd.push_back(n);
  std::vector<int> saved_carries;
  for (int p = 0; p < nj; ++p) {
    const trace::BodyInput& in = joint[static_cast<size_t>(p)];
    if (in.kind == trace::BodyInput::Explicit && in.index < nc && reads[static_cast<size_t>(p)]) {
      saved_carries.push_back(p);
      fwd.push_back(trace::node_of(c[static_cast<size_t>(in.index)]));
    }
  }
  for (const ir::NodePtr& r : part.residuals) fwd.push_back(r);
  d.num_saved = static_cast<int>(saved_carries.size() + part.residuals.size());
  d.forward = ir::make_body(std::move(fwd), nj, tool + " (forward)");
  d.forward_inputs = joint;
  return saved_carries;
}

// 4. The body the backward loop calls: the joint inputs, then the residuals -> the gradients
// (part.roots: of the `nfc` floating carries, the `nfx` floating xs, then the floating consts
// and lifted tensors), each x's low-rank gradient as its two factors (d.factored).
std::shared_ptr<const ir::Body> core_body(Diff& d, const ir::Partition& part, size_t nfc,
                                          size_t nfx, int nj, bool factors,
                                          const std::string& name) {
  std::vector<ir::NodePtr> roots;
  for (size_t r = 0; r < part.roots.size(); ++r) {
    ir::NodePtr f, g;
    const bool is_x = r >= nfc && r < nfc + nfx;
    const bool factor = is_x && factors && low_rank_product(part.roots[r], f, g);
    if (is_x) d.factored.push_back(factor);
    if (factor) {
      roots.push_back(std::move(f));
      roots.push_back(std::move(g));
      metrics::loop_grad_factored.add();
    } else {
      roots.push_back(part.roots[r]);
    }
  }
  return ir::make_body(roots, nj + static_cast<int>(part.residuals.size()), name);
}

// 5. The backward loop's body (d.backward, see Diff), calling `core` inline on the saved
// values (the carries at joint Params `saved_carries`, then the residuals).
void backward_body(Diff& d, const ScanEntry& e, const std::shared_ptr<const ir::Body>& core,
                   const std::vector<trace::BodyInput>& joint,
                   const std::vector<int>& saved_carries, const std::string& name) {
  const int nc = static_cast<int>(e.carry.size()), nx = static_cast<int>(e.x.size());
  const std::vector<int> fc = floating(e.carry), fk = floating(e.consts), fy = floating(e.ys);
  trace::TraceScope s(name);
  NoGradGuard no_grad;
  Types ct_types, acc_types, saved_types, cty_types;
  for (int i : fc) ct_types.push_back(e.carry[static_cast<size_t>(i)]);
  for (int i : fk) acc_types.push_back(e.consts[static_cast<size_t>(i)]);
  for (const Tensor& l : e.lifted)
    if (is_floating(l.dtype())) acc_types.emplace_back(l.shape(), l.dtype());
  const auto& fwd_results = d.forward->results;
  for (size_t i = fwd_results.size() - static_cast<size_t>(d.num_saved); i < fwd_results.size();
       ++i)
    saved_types.emplace_back(fwd_results[i]->shape, fwd_results[i]->dtype);
  for (int i : fy) cty_types.push_back(e.ys[static_cast<size_t>(i)]);
  std::vector<Tensor> ct = placeholders(s, ct_types), acc = placeholders(s, acc_types),
                      saved = placeholders(s, saved_types), xs = placeholders(s, e.x),
                      cty = placeholders(s, cty_types), ks = placeholders(s, e.consts);
  d.backward_carries = static_cast<int>(ct.size() + acc.size());
  d.backward_xs = static_cast<int>(saved.size() + xs.size() + cty.size());
  std::pair<ir::NodePtr, ir::NodePtr> rng;
  if (e.rng_count > 0) rng = trace::random_operands(0);
  std::vector<int> saved_at(static_cast<size_t>(nc), -1);  // each saved carry's place in saved
  for (size_t k = 0; k < saved_carries.size(); ++k)
    saved_at[static_cast<size_t>(joint[static_cast<size_t>(saved_carries[k])].index)] =
        static_cast<int>(k);
  auto explicit_node = [&](size_t i) -> ir::NodePtr {
    const auto c = static_cast<size_t>(nc), x = static_cast<size_t>(nx);
    if (i < c) {  // a carry: saved if the backward reads it, else never read
      const int k = saved_at[i];
      return trace::node_of(k >= 0 ? saved[static_cast<size_t>(k)]
                                   : zeros(e.carry[i].first, e.carry[i].second));
    }
    return trace::node_of(i < c + x ? xs[i - c] : ks[i - c - x]);
  };
  std::vector<ir::NodePtr> args = body_operands(
      joint, explicit_node, [&](size_t i) { return trace::node_of(e.lifted[i]); },
      // cotangents: floating carries, then floating ys
      [&](size_t i) { return trace::node_of(i < ct.size() ? ct[i] : cty[i - ct.size()]); }, rng);
  for (size_t r = saved_carries.size(); r < saved.size(); ++r)
    args.push_back(trace::node_of(saved[r]));
  std::vector<Tensor> g;
  {
    trace::OpScope op;
    for (ir::NodePtr& n : ir::make_call(core, std::move(args), nullptr, /*inline_call=*/true))
      g.push_back(trace::make_pending(std::move(n)));
  }
  // g: floating carries, floating xs (two factors where factored), floating consts, floating
  // lifted
  size_t xs_end = fc.size();
  for (char f : d.factored) xs_end += f ? 2 : 1;
  std::vector<Tensor> outs(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(fc.size()));
  for (size_t j = 0; j < acc.size(); ++j) outs.push_back(acc[j] + g[xs_end + j]);
  for (size_t j = fc.size(); j < xs_end; ++j) outs.push_back(g[j]);
  d.backward = s.finish(outs, name);
  d.backward_inputs = s.inputs();
  d.backward_lifted = s.lifted();
}

// Traces the VJP of e's body jointly with its forward, and builds the two loop bodies. With
// `first` (an entry not traced yet, for a loop that will be differentiated), this is the
// body's only trace: e's forward body and what it returns come from it too, so the
// function runs once.
std::shared_ptr<const Diff> make_diff(ScanEntry& e, Remat remat, bool factors,
                                      const std::string& tool, bool first = false) {
  if (first) metrics::loop_trace.add();
  metrics::loop_backward_trace.add();
  auto d = std::make_shared<Diff>();
  const std::string name = tool + " (backward)";
  std::vector<trace::BodyInput> joint;   // the joint trace's inputs
  std::vector<int> saved_carries;        // joint Param of each carry the backward reads
  std::shared_ptr<const ir::Body> core;  // joint inputs, then residuals -> gradients
  {
    // 1. The joint trace: the body on inputs that require grad, then its VJP.
    trace::TraceScope s(name);
    s.set_lift_grad(trace::TraceScope::LiftGrad::all);
    EnableGradGuard grad_on;
    std::vector<Tensor> c = placeholders(s, e.carry, true), xs = placeholders(s, e.x, true),
                        ks = placeholders(s, e.consts, true);
    if (!first) s.lift_first(e.lifted);
    LoopTraced t = e.retrace(own_handles(c), own_handles(xs), own_handles(ks));
    if (first) set_body(e, s, t, tool.c_str());
    std::vector<Tensor> inputs = c, outputs = t.carry;
    inputs.insert(inputs.end(), xs.begin(), xs.end());
    inputs.insert(inputs.end(), ks.begin(), ks.end());
    outputs.insert(outputs.end(), t.ys.begin(), t.ys.end());
    // the gradients of the floating carries, xs, consts, then lifted tensors
    const std::vector<Tensor> grads =
        joint_vjp(s, inputs, outputs, e.lifted, tool.c_str(), "the loop body").grads;
    joint = s.inputs();
    const ir::Partition part = split_residuals(grads, joint, remat);
    saved_carries = forward_body(*d, joint, part, c, t, tool);
    core = core_body(*d, part, floating(e.carry).size(), floating(e.x).size(),
                     static_cast<int>(joint.size()), factors, name);
  }
  backward_body(*d, e, core, joint, saved_carries, name);
  return d;
}

ir::Loop scan_loop(std::shared_ptr<const ir::Body> body, int64_t length, bool reverse,
                   int num_carry) {
  ir::Loop l;
  l.kind = ir::Loop::Kind::Scan;
  l.body = std::move(body);
  l.length = length;
  l.reverse = reverse;
  l.num_carry = num_carry;
  return l;
}

}  // namespace

void not_a_pair(const char* tool, const std::string& got) {
  fail(tool, "the body must return a pair (new_carry, y), but it returned a Tree ", got,
       ". Return std::pair{new_carry, y}, or Tree::list({new_carry, y}); for no y, use an "
       "empty Tree as y.");
}

void carry_mismatch(const char* tool, const pytree::Flat& before, const pytree::Flat& after) {
  const auto& a = before.parts;
  const auto& b = after.parts;
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  std::string what;
  // a part is "path: type"; a carry that is one tensor has an empty path
  auto unnamed = [](const std::string& part) { return part.rfind(": ", 0) == 0; };
  auto named = [&](const std::string& part) { return unnamed(part) ? part.substr(2) : part; };
  if (i < a.size() && i < b.size()) {
    what = "the input carry " + std::string(unnamed(a[i]) ? "" : "component ") + named(a[i]) +
           " became " + named(b[i]);
  } else if (i < a.size()) {
    what = "the new carry lacks " + a[i];
  } else {
    what = "the new carry has an extra " + (i < b.size() ? b[i] : std::string("part"));
  }
  fail(tool,
       "the body function's carry input and carry output must have equal types "
       "(structure, shapes and dtypes), but they differ: ",
       what,
       ". Return a new carry with init's structure; cast it with astype(t, dtype) or reshape it, "
       "or change init to the type the body produces.");
}

void clear_scan_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.entries.clear();
  c.modes.clear();
}

ScanOutputs run_scan(const ScanArgs& a, const LoopTraceFn& fn) {
  const char* tool = a.tool;
  if (a.xs.empty())
    fail(tool,
         "xs is an empty pytree: scan takes the number of iterations from the leading "
         "dim of xs. Pass at least one tensor whose first dim is the length (for a counted "
         "loop, use fori_loop).");
  int64_t n = -1;
  size_t first = 0;
  for (size_t i = 0; i < a.xs.size(); ++i) {
    const Tensor& x = *a.xs[i];
    if (x.ndim() == 0) {
      const std::string path = a.xs_paths()[i];
      fail(tool, path.empty() || path == "xs" ? std::string("xs") : "xs leaf " + path,
           " is a scalar (", x.type_str(), "); every xs leaf needs a leading dim to scan over.");
    }
    if (n < 0) {
      n = x.shape()[0];
      first = i;
    } else if (x.shape()[0] != n) {
      const auto paths = a.xs_paths();
      fail(tool, "got xs leaves with different leading sizes: ", paths[first], " ",
           a.xs[first]->type_str(), " has ", n, ", ", paths[i], " ", x.type_str(), " has ",
           x.shape()[0], ". Every xs leaf must have the number of iterations as its first dim.");
    }
  }
  Types carry = types_of(a.init), slice = types_of(a.xs), const_types = types_of(a.consts);
  for (auto& [shape, dtype] : slice) shape = Shape(shape.begin() + 1, shape.end());

  std::shared_ptr<ScanEntry> e;
  uint64_t key = a.cache_key ? keyed_by_thread_state(a.cache_key) : 0;
  std::shared_ptr<ModeGuard> modes;  // held across the trace: the cache may drop it
  if (key) {
    {
      Cache& c = cache();
      std::lock_guard<std::mutex> lock(c.mu);
      if (std::shared_ptr<ModeGuard>* g = c.modes.find(key)) modes = *g;
      if (!modes) {
        modes = std::make_shared<ModeGuard>();
        c.modes.insert(key, modes);
      }
    }
    key = key_with_modes(key, *modes);
    e = find(key, carry, slice, const_types);
  }
  if (e) {
    metrics::loop_hit.add();
  } else {
    std::optional<ModeRecording> recording;
    if (modes) recording.emplace(*modes);
    // where the loop's own inputs require grad, the one trace is the joint one
    bool inputs_need_grad = false;
    if (autograd::grad_enabled())
      for (const auto* list : {&a.init, &a.xs, &a.consts})
        for (const Tensor* t : *list)
          inputs_need_grad = inputs_need_grad || autograd::requires_grad(*t);
    if (inputs_need_grad) {
      e = new_entry(fn, carry, slice, const_types);
      const bool factors = runtime::current_passes().on(runtime::Pass::FactoredGrads);
      e->diff[a.options.remat == Remat::save ? 0 : 1][factors] =
          make_diff(*e, a.options.remat, factors, tool, true);
    } else {
      e = trace_body(tool, fn, carry, slice, const_types);
    }
    if (key) insert(key, e);
  }
  const int nc = static_cast<int>(carry.size()), nx = static_cast<int>(slice.size()),
            ny = static_cast<int>(e->ys.size());

  bool differentiated = false;
  if (autograd::grad_enabled()) {
    for (const auto* list : {&a.init, &a.xs, &a.consts})
      for (const Tensor* t : *list) differentiated = differentiated || autograd::requires_grad(*t);
    for (const Tensor& t : e->lifted) differentiated = differentiated || autograd::requires_grad(t);
  }
  std::pair<ir::NodePtr, ir::NodePtr> rng;
  if (e->rng_count > 0) rng = trace::random_operands(static_cast<uint64_t>(n) * e->rng_count);
  std::vector<ir::NodePtr> explicit_nodes;
  for (const auto* list : {&a.init, &a.xs, &a.consts})
    for (const Tensor* t : *list) explicit_nodes.push_back(trace::node_of(*t));

  ScanOutputs out;
  out.ys_like = e->ys_like;
  const bool reverse = a.options.reverse;
  if (!differentiated) {
    ir::Loop l = scan_loop(e->body, n, reverse, nc);
    assign_roles(l, e->inputs, nc, nx, e->rng_count);
    std::vector<Tensor> r =
        record_loop(std::move(l), loop_operands(e->inputs, explicit_nodes, e->lifted, rng));
    out.carry.assign(r.begin(), r.begin() + nc);
    out.ys.assign(r.begin() + nc, r.end());
    return out;
  }

  std::shared_ptr<const Diff> d;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    const bool factors = runtime::current_passes().on(runtime::Pass::FactoredGrads);
    auto& slot = e->diff[a.options.remat == Remat::save ? 0 : 1][factors];
    if (!slot) slot = make_diff(*e, a.options.remat, factors, tool);
    d = slot;
  }
  ir::Loop l = scan_loop(d->forward, n, reverse, nc);
  assign_roles(l, d->forward_inputs, nc, nx, e->rng_count);
  std::vector<Tensor> r =
      record_loop(std::move(l), loop_operands(d->forward_inputs, explicit_nodes, e->lifted, rng));
  out.carry.assign(r.begin(), r.begin() + nc);
  out.ys.assign(r.begin() + nc, r.begin() + nc + ny);
  std::vector<Tensor> saved(r.begin() + nc + ny, r.end());

  std::vector<Tensor> outs = out.carry;
  outs.insert(outs.end(), out.ys.begin(), out.ys.end());
  std::vector<const Tensor*> inputs = a.init;
  inputs.insert(inputs.end(), a.xs.begin(), a.xs.end());
  inputs.insert(inputs.end(), a.consts.begin(), a.consts.end());
  for (const Tensor& t : e->lifted) inputs.push_back(&t);
  // xs, consts and lifted tensors as the forward read them: a later copy_ into one does not
  // reach the backward
  std::vector<ir::NodePtr> xs, consts, lifted;
  for (const Tensor* t : a.xs) xs.push_back(trace::node_of(*t));
  for (const Tensor* t : a.consts) consts.push_back(trace::node_of(*t));
  for (const Tensor& t : d->backward_lifted) lifted.push_back(trace::node_of(t));
  autograd::record_multi(
      outs, tool, inputs,
      [e, d, n, reverse, saved, xs, consts, lifted, rng, tool](const std::vector<Tensor>& grads) {
        if (autograd::grad_enabled())  // the engine enables grad for create_graph only
          fail(tool,
               "higher-order gradients (create_graph) through a loop are not supported: "
               "its backward loop records no gradient of its own. Take first-order gradients "
               "of the loop, or unroll it for higher orders.");
        const size_t nc = e->carry.size();
        const std::vector<int> fc = floating(e->carry), fx = floating(e->x),
                               fk = floating(e->consts), fy = floating(e->ys);
        auto grad_or_zeros = [&](size_t k, const Shape& shape, DType dtype) {
          return k < grads.size() && grads[k].defined() ? grads[k] : zeros(shape, dtype);
        };
        // the backward loop's explicit inputs, in the order make_diff made them
        std::vector<ir::NodePtr> ex;
        for (int i : fc) {
          const auto& [shape, dtype] = e->carry[static_cast<size_t>(i)];
          ex.push_back(trace::node_of(grad_or_zeros(static_cast<size_t>(i), shape, dtype)));
        }
        std::vector<size_t> fl;
        for (size_t i = 0; i < e->lifted.size(); ++i)
          if (is_floating(e->lifted[i].dtype())) fl.push_back(i);
        for (int i : fk) {
          const auto& [shape, dtype] = e->consts[static_cast<size_t>(i)];
          ex.push_back(trace::node_of(zeros(shape, dtype)));
        }
        for (size_t i : fl) ex.push_back(trace::node_of(zeros_like(e->lifted[i])));
        for (const Tensor& t : saved) ex.push_back(trace::node_of(t));
        ex.insert(ex.end(), xs.begin(), xs.end());
        for (int i : fy) {
          auto [shape, dtype] = e->ys[static_cast<size_t>(i)];
          std::vector<int64_t> dims = shape.vec();
          dims.insert(dims.begin(), n);
          ex.push_back(
              trace::node_of(grad_or_zeros(nc + static_cast<size_t>(i), Shape(dims), dtype)));
        }
        ex.insert(ex.end(), consts.begin(), consts.end());
        ir::Loop l = scan_loop(d->backward, n, !reverse, d->backward_carries);
        assign_roles(l, d->backward_inputs, d->backward_carries, d->backward_xs, e->rng_count);
        std::vector<Tensor> r =
            record_loop(std::move(l), loop_operands(d->backward_inputs, ex, lifted, rng));
        // r: gradients of floating carries, consts, lifted; then of floating xs (stacked)
        std::vector<Tensor> g(nc + xs.size() + consts.size() + e->lifted.size());
        size_t at = 0;
        for (int i : fc) g[static_cast<size_t>(i)] = r[at++];
        for (int i : fk) g[nc + xs.size() + static_cast<size_t>(i)] = r[at++];
        for (size_t i : fl) g[nc + xs.size() + consts.size() + i] = r[at++];
        for (size_t j = 0; j < fx.size(); ++j) {
          Tensor& gx = g[nc + static_cast<size_t>(fx[j])];
          if (d->factored[j]) {  // every iteration's Fᵀ G, as one batched product
            gx = matmul(transpose(r[at], -1, -2), r[at + 1]);
            at += 2;
          } else {
            gx = r[at++];
          }
        }
        return g;
      });
  return out;
}

void fori_loop_range_too_long(int64_t lower, int64_t upper) {
  fail("fori_loop", "the range [", lower, ", ", upper,
       ") has more than 2^63 - 1 iterations; no loop can run them all.");
}

}  // namespace lazytrace::tools
