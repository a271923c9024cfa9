// sync(): gather the pending tensors, find or compile the graph's executable, run it, and
// cut the pending graph at the results.
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "compiler/compile_cache.h"
#include "compiler/passes.h"
#include "core/hash.h"
#include "ir/graph.h"
#include "runtime/communicator.h"
#include "runtime/exit_gate.h"
#include "runtime/interrupt.h"
#include "trace/trace_context.h"

namespace lazytrace {
namespace {

// Walks stamp scratch fields on shared nodes, so one graph is gathered at a time; the
// lock is held for the walk and for cutting the graph afterwards, not while it compiles or
// runs. A sync's roots are in flight meanwhile: a walk that reaches one waits (g_cut) until
// it is computed, so no graph reads a buffer that a running sync was given to write into.
// (never destroyed: a detached thread may still sync while the process exits)
std::mutex g_walk_mutex;
std::condition_variable& g_cut = *new std::condition_variable();

// Who holds each node of a sync's graph. Every holder of a node is counted: its users in
// this graph, the synced tensors (their nodes become leaves, dropping their operands), and
// anything else (another tensor, a pending op outside the graph, the tape, a traced body).
struct Holders {
  long refs = 0, count = 0;  // holders seen in the graph; holders in all
  bool root = false, live = false;
};

// The walk position of a node, or n for one it did not visit (a traced body's own leaves
// are parameters too, but not in `order`: the body holds them, so they live).
size_t position(const ir::Walk& w, const ir::Node* node) {
  const size_t n = w.order.size();
  const auto i = static_cast<size_t>(node->index);
  return node->index >= 0 && i < n && w.order[i] == node ? i : n;
}

// Counts the holders of the walk's nodes; `roots` are the synced tensors' nodes (`todo`'s,
// each held by its tensor), then the values kept with them.
void count_holders(const ir::Walk& w, const std::vector<TensorImpl*>& todo,
                   const std::vector<ir::Node*>& roots, std::vector<Holders>& h) {
  const size_t n = w.order.size();
  h.assign(n + 1, Holders{});
  h[n].live = true;
  for (size_t i = 0; i < n; ++i) {
    const ir::Node& node = *w.order[i];
    for (int k = 0; k < node.num_operands(); ++k) {
      const ir::NodePtr& o = node.operand(k);
      Holders& ho = h[position(w, o.get())];
      ++ho.refs;
      ho.count = o.use_count();
    }
  }
  for (TensorImpl* impl : todo) {
    Holders& hr = h[position(w, impl->node.get())];
    ++hr.refs;
    hr.count = impl->node.use_count();
  }
  for (const ir::Node* r : roots) h[position(w, r)].root = true;
}

// A value the graph computes on its way to the roots that something outside it still holds
// (a tensor, the tape's saved inputs, a pending op that is not synced) is one more result,
// as MLX's eval keeps every array it computes: otherwise the next sync that reaches it
// computes it again, and a loop that reads only its loss (`loss.item()`) would recompute
// every earlier step's updates in each step. Generators and views of leaves are not kept,
// nor is a view no smaller than what it views (a reshape, a permutation, a broadcast): that
// value is kept instead; a slice is kept itself. A node of many results (a call, a loop, an
// update) is not one value: its results still held are kept, those outside the graph too
// (an update's moments, which the next step's loss does not read). Adds them to `roots`, to
// the walk and to its results.
void keep_held_values(ir::Walk& w, const std::vector<TensorImpl*>& todo, std::vector<Holders>& h,
                      std::vector<ir::Node*>& roots, std::vector<char>& wanted,
                      std::vector<ir::NodePtr>& held) {
  using ir::OpKind;
  const size_t n = w.order.size(), synced = roots.size();
  wanted.assign(n, 0);
  held.clear();
  for (size_t i = n; i-- > 0;) {  // users before their operands
    ir::Node& node = *w.order[i];
    if (h[i].root || !(wanted[i] || h[i].count > h[i].refs)) continue;
    if (ir::is_layout(node.op) || node.op == OpKind::CheckTargets) {
      const ir::Node& of = *node.operand(0);
      if (ir::op_info(of.op).family == ir::OpFamily::Leaf) continue;  // nothing to keep
      if (node.op == OpKind::Slice)
        roots.push_back(&node);
      else
        wanted[position(w, &of)] = 1;
    } else if (ir::has_many_results(node.op)) {
      for (ir::NodePtr& r : node.live_results())
        if (r->op == OpKind::CallResult && !r->in_flight &&
            position(w, r.get()) == w.order.size()) {  // not reached: after the walk's nodes
          ir::add_node(w, *r);
          roots.push_back(r.get());
          held.push_back(std::move(r));  // (its holder may drop it while the graph runs)
        }
    } else if (node.op != OpKind::Pack && !ir::is_generator(node.op) &&
               ir::op_info(node.op).family != ir::OpFamily::Leaf) {
      roots.push_back(&node);
    }
  }
  for (size_t i = synced; i < roots.size(); ++i) ir::add_result(w, *roots[i]);
  if (roots.size() > synced) count_holders(w, todo, roots, h);
}

// Which parameter buffers no one can read after this sync, so the executable may write its
// outputs into them (Executable::run's `donated`). A node held from outside, or by a live
// node that is not a synced root, stays live, and so does all it reads; a parameter that
// stays live, or whose buffer another node or tensor also holds, is never given.
void dead_params(const ir::Walk& w, std::vector<Holders>& h, std::vector<char>& dead) {
  const size_t n = w.order.size();
  for (size_t i = n; i-- > 0;) {  // users before their operands
    h[i].live = h[i].live || h[i].count > h[i].refs;
    if (!h[i].live || h[i].root) continue;
    const ir::Node& node = *w.order[i];
    for (int k = 0; k < node.num_operands(); ++k) h[position(w, node.operand(k).get())].live = true;
  }
  dead.assign(w.params.size(), 0);
  for (size_t k = 0; k < w.params.size(); ++k) {
    const ir::Node* p = w.params[k];
    const Holders& hp = h[position(w, p)];
    dead[k] = !hp.live && !hp.root && p->buffer().use_count() == 1 && !p->buffer()->external();
  }
}

// What a sync gathers, kept per thread from one sync to the next so that a sync of a
// small graph allocates nothing for it (a sync inside a sync, should one run, gets its own).
struct SyncScratch {
  std::vector<TensorImpl*> todo;
  std::vector<ir::Node*> roots;
  ir::Walk walk;
  std::vector<Holders> holders;
  std::vector<char> wanted;
  std::vector<ir::NodePtr> held;  // the kept results outside the walk
  std::vector<char> donated;
  std::vector<runtime::BufferPtr> params;
  std::vector<runtime::ScalarArg> scalars;
  bool in_use = false;
};

// Runs with g_walk_mutex held by `lock`, which it releases while it compiles and runs. A
// named sync (compile's) names its graph and counts into "ExecuteCount[name]" and
// "CompileCount[name]" too.
void sync_impls(const std::vector<TensorImpl*>& impls, std::unique_lock<std::mutex>& lock,
                const std::string& name = "") {
  thread_local SyncScratch kept;
  std::optional<SyncScratch> own;  // only where this thread's scratch is in use already
  SyncScratch& sc = kept.in_use ? own.emplace() : kept;
  sc.in_use = true;
  struct Release {
    SyncScratch& sc;
    ~Release() {
      sc.params.clear();  // the buffers are not held beyond the sync
      sc.held.clear();
      const size_t most = std::max({sc.todo.capacity(), sc.walk.order.capacity(),
                                    sc.walk.params.capacity(), sc.walk.scalars.capacity()});
      if (most > 4096) sc = SyncScratch{};  // nor a large graph's memory
      sc.in_use = false;
    }
  } release{sc};
  std::vector<TensorImpl*>& todo = sc.todo;
  std::vector<ir::Node*>& roots = sc.roots;
  ir::Walk& w = sc.walk;
  for (;;) {
    todo.clear();
    roots.clear();
    for (TensorImpl* impl : impls)
      if (impl->pending()) {
        todo.push_back(impl);
        roots.push_back(impl->node.get());
      }
    if (roots.empty()) return;
    ir::walk_into(roots, w);
    bool waits = false;
    for (const ir::Node* n : w.order) waits = waits || n->in_flight;
    if (!waits) break;
    g_cut.wait(lock);  // another thread computes part of this graph: walk again after
  }
  for (const ir::Node* n : w.order)
    if (n->op == ir::OpKind::Param) trace::escaped_from_trace("sync");
  for (const ir::Node* p : w.params)
    if (p->lost)
      fail("sync", "a value this sync needs (a buffer of ", dtype_short(p->dtype), p->shape.str(),
           ") was lost: an earlier sync that read it was interrupted or failed after "
           "it was given that buffer for its results. Compute the tensors that depend on it "
           "again (reload the weights or the checkpoint); no later sync reads it.");
  count_holders(w, todo, roots, sc.holders);
  keep_held_values(w, todo, sc.holders, roots, sc.wanted, sc.held);
  const compiler::GraphShape shape{w.params.size(), w.scalars.size(), w.results.size(),
                                   w.order.size()};
  runtime::Device& device = runtime::default_device();
  const runtime::PassSet passes = runtime::current_passes();
  runtime::Communicator& comm = runtime::current_communicator();
  uint64_t key =
      hash_combine(hash_combine(w.key, reinterpret_cast<uintptr_t>(&device)), passes.off_bits());
  if (comm.cache_slot() != 0) key = hash_combine(key, static_cast<uint64_t>(comm.cache_slot()));
  key = comm.overlap_key(key);
  compiler::CompileCache& cache = compiler::CompileCache::global();
  auto exe = cache.find(key, shape);
  std::optional<ir::Graph> graph;  // made while the walk's nodes are safe to read
  if (!exe) graph = ir::build_graph(w, name);
  std::vector<char>& donated = sc.donated;
  dead_params(w, sc.holders, donated);
  std::vector<runtime::BufferPtr>& params = sc.params;
  params.clear();
  for (ir::Node* n : w.params) params.push_back(n->buffer());
  std::vector<runtime::ScalarArg>& scalars = sc.scalars;
  scalars.clear();
  for (ir::Node* n : w.scalars) scalars.push_back({n->value, n->ivalue});
  for (ir::Node* r : roots) r->in_flight = true;
  std::vector<runtime::BufferPtr> results;
  lock.unlock();
  const runtime::RunGuard running;
  if (!running.entered()) {  // the process exits: give the roots back, then wait for good
    {
      std::lock_guard<std::mutex> relock(*lock.mutex());
      for (ir::Node* r : roots) r->in_flight = false;
    }
    g_cut.notify_all();
    runtime::wait_forever();
  }
  bool ran = false;  // the run started (before it, a failure wrote into no buffer)
  try {
    // this sync's own compile (the process's count also moves with other threads' compiles)
    const bool compiles = !exe;
    if (compiles) exe = cache.compile(key, shape, device, std::move(*graph), passes);
    if (!name.empty()) {
      metrics::named_counter("ExecuteCount[" + name + "]").add();
      if (compiles) metrics::named_counter("CompileCount[" + name + "]").add();
    }
    if (exe->collectives()) {
      if (comm.cache_slot() != 0) {
        // This run waits for the other ranks, which are threads of this process. A rank
        // whose sync reaches one of these roots (this thread's pending tensors it shares,
        // as a batch made before run_threads) must not wait for it in turn, or neither
        // would go on: it computes them itself, from the same inputs, which this run then
        // must not overwrite (its own run holds them: it never overwrites this run's).
        std::fill(donated.begin(), donated.end(), char{0});
        {
          std::lock_guard<std::mutex> relock(*lock.mutex());
          for (ir::Node* r : roots) r->in_flight = false;
        }
        g_cut.notify_all();
      }
      comm.check_same_collectives(exe->collectives(), exe->describe_collectives(), name);
    }
    metrics::ScopedTimer t(metrics::execute_time);
    runtime::clear_interrupt();  // a request made before this run is not for it
    ran = true;
    results = exe->run(params, scalars, donated);
  } catch (...) {
    lock.lock();
    for (size_t k = 0; ran && k < donated.size(); ++k)  // may be half written: never read again
      if (donated[k]) w.params[k]->lost = true;
    for (ir::Node* r : roots) r->in_flight = false;
    g_cut.notify_all();
    throw;
  }
  lock.lock();
  metrics::execute_count.add();
  metrics::sync_count.add();
  // Cut the pending graph: each computed op becomes a leaf for its buffer, so tensors
  // still pending that use it (after a partial sync) read it instead of recomputing it.
  for (size_t i = 0; i < todo.size(); ++i) {
    TensorImpl& impl = *todo[i];
    impl.buffer = results[i];
    impl.unlink();
    if (impl.node->op != ir::OpKind::Data) impl.node->become_data(results[i]);
  }
  for (size_t i = todo.size(); i < roots.size(); ++i) roots[i]->become_data(results[i]);
  for (ir::Node* r : roots) r->in_flight = false;
  g_cut.notify_all();
}

std::vector<ir::Node*> roots_of(const std::vector<Tensor>& tensors) {
  std::vector<ir::Node*> roots;
  for (const Tensor& t : tensors) roots.push_back(trace::node_of(t).get());
  return roots;
}

}  // namespace

void clear_caches() {
  compiler::CompileCache::global().clear();
  runtime::clear_device_caches();
}

void sync() {
  trace::sync_named(nullptr, "");
}

void sync(const std::vector<Tensor>& tensors) {
  trace::sync_named(&tensors, "");
}

void trace::sync_named(const std::vector<Tensor>* tensors, const std::string& name) {
  trace::check_not_tracing("sync()");
  ++trace::g_syncs_started;
  if (!tensors) {
    std::unique_lock<std::mutex> lock(g_walk_mutex);
    return sync_impls(trace::pending_tensors(), lock, name);
  }
  std::vector<TensorImpl*> impls;  // the caller's handles keep these alive
  for (const Tensor& t : *tensors) {
    if (!t.defined()) fail("sync", "tensor ", impls.size(), " is undefined (default-constructed).");
    impls.push_back(t.impl().get());
  }
  std::unique_lock<std::mutex> lock(g_walk_mutex);
  sync_impls(impls, lock, name);
}

void interrupt() {
  runtime::request_interrupt();
}

void set_interrupt_check(bool (*check)()) {
  runtime::set_interrupt_check(check);
}

namespace debug {

std::string to_text(const std::vector<Tensor>& tensors) {
  std::lock_guard<std::mutex> lock(g_walk_mutex);
  return ir::to_text(ir::build_graph(ir::walk(roots_of(tensors)), "pending"));
}

std::string to_dot(const std::vector<Tensor>& tensors) {
  std::lock_guard<std::mutex> lock(g_walk_mutex);
  return ir::to_dot(ir::build_graph(ir::walk(roots_of(tensors)), "pending"));
}

std::vector<std::string> set_disabled_passes(const std::vector<std::string>& names) {
  std::vector<std::string> before = disabled_passes();
  runtime::set_current_passes(runtime::PassSet::without(names));
  return before;
}

std::vector<std::string> disabled_passes() {
  return runtime::current_passes().off_names();
}

bool pass_on(std::string_view name) {
  // by name on a call's hot path (the Python package's memo_dicts): looked up, not scanned
  static const std::unordered_map<std::string_view, runtime::Pass> by_name = [] {
    std::unordered_map<std::string_view, runtime::Pass> m;
    for (int k = 0; k < runtime::kPassCount; ++k)
      m.emplace(runtime::pass_name(static_cast<runtime::Pass>(k)), static_cast<runtime::Pass>(k));
    return m;
  }();
  if (auto it = by_name.find(name); it != by_name.end())
    return runtime::current_passes().on(it->second);
  runtime::PassSet::without({std::string(name)});  // fails, naming every pass
  return false;
}

std::vector<std::string> pass_names() {
  std::vector<std::string> names;
  for (int k = 0; k < runtime::kPassCount; ++k)
    names.emplace_back(runtime::pass_name(static_cast<runtime::Pass>(k)));
  return names;
}

std::string kernel_choices() {
  return runtime::default_device().kernel_choices();
}

std::string to_program(const std::vector<Tensor>& tensors) {
  std::unique_lock<std::mutex> lock(g_walk_mutex);
  ir::Graph g = ir::build_graph(ir::walk(roots_of(tensors)), "pending");
  lock.unlock();
  const runtime::PassSet passes = runtime::current_passes();
  return runtime::default_device().compile(compiler::optimize(g, passes), passes)->describe();
}

}  // namespace debug
}  // namespace lazytrace
