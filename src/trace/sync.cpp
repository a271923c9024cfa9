// sync(): gather the pending tensors, find or compile the graph's executable, run it, and
// cut the pending graph at the results.
#include <mutex>

#include "backends/cpu/cpu_device.h"
#include "compiler/compile_cache.h"
#include "compiler/program.h"
#include "ir/graph.h"
#include "trace/trace_context.h"

namespace lazytrace {
namespace {

// Walks stamp scratch fields on shared nodes, so one graph is gathered at a time.
std::mutex g_walk_mutex;

// Which parameter buffers no one can read after this sync, so the executable may write its
// outputs into them (Executable::run's `donated`). Every holder of a node is counted: its
// users in this graph, the synced tensors (their nodes become leaves, dropping their
// operands), and anything else (another tensor, a pending op outside the graph, a traced
// body). A node held from outside, or by a live node that is not a synced root, stays
// live, and so does all it reads; a parameter that stays live, or whose buffer another node
// or tensor also holds, is never given.
std::vector<char> dead_params(const ir::Walk& w, const std::vector<TensorImpl*>& todo) {
  const size_t n = w.order.size();
  // the walk position of a node, or n for one it did not visit (a traced body's own
  // leaves are parameters too, but not in `order`: the body holds them, so they live)
  auto pos = [&](const ir::Node* node) {
    const auto i = static_cast<size_t>(node->index);
    return node->index >= 0 && i < n && w.order[i] == node ? i : n;
  };
  std::vector<long> refs(n + 1, 0), count(n + 1, 0);
  std::vector<char> root(n + 1, 0), live(n + 1, 0);
  live[n] = 1;
  for (size_t i = 0; i < n; ++i) {
    const ir::Node& node = *w.order[i];
    for (int k = 0; k < node.num_operands(); ++k) {
      const ir::NodePtr& o = node.operand(k);
      ++refs[pos(o.get())];
      count[pos(o.get())] = o.use_count();
    }
  }
  for (TensorImpl* impl : todo) {
    const size_t r = pos(impl->node.get());
    ++refs[r];
    count[r] = impl->node.use_count();
    root[r] = 1;
  }
  for (size_t i = n; i-- > 0;) {  // users before their operands
    live[i] = live[i] || count[i] > refs[i];
    if (!live[i] || root[i]) continue;
    const ir::Node& node = *w.order[i];
    for (int k = 0; k < node.num_operands(); ++k) live[pos(node.operand(k).get())] = 1;
  }
  std::vector<char> dead(w.params.size(), 0);
  for (size_t k = 0; k < w.params.size(); ++k) {
    const ir::Node* p = w.params[k];
    const size_t i = pos(p);
    dead[k] = !live[i] && !root[i] && p->data.use_count() == 1 &&
              !static_cast<const runtime::Buffer*>(p->data.get())->external();
  }
  return dead;
}

// Runs with g_walk_mutex held. A named sync (compile's) names its graph and counts into
// "ExecuteCount[name]" and "CompileCount[name]" too.
void sync_impls(const std::vector<TensorImpl*>& impls, const std::string& name = "") {
  std::vector<TensorImpl*> todo;
  std::vector<ir::Node*> roots;
  for (TensorImpl* impl : impls)
    if (impl->pending()) {
      todo.push_back(impl);
      roots.push_back(impl->node.get());
    }
  if (roots.empty()) return;
  ir::Walk w = ir::walk(roots);
  for (const ir::Node* n : w.order)
    if (n->op == ir::OpKind::Param) trace::escaped_from_trace("sync");
  const compiler::GraphShape shape{w.params.size(), w.scalars.size(), w.results.size(),
                                   w.order.size()};
  const int64_t compiles = metrics::compile_count.value();
  auto exe = compiler::CompileCache::global().get_or_compile(
      w.key, shape, cpu::cpu_device(), [&] { return ir::build_graph(w, name); });
  if (!name.empty()) {
    metrics::named_counter("ExecuteCount[" + name + "]").add();
    if (metrics::compile_count.value() != compiles)
      metrics::named_counter("CompileCount[" + name + "]").add();
  }
  const std::vector<char> donated = dead_params(w, todo);
  std::vector<runtime::BufferPtr> params;
  params.reserve(w.params.size());
  for (ir::Node* n : w.params) params.push_back(std::static_pointer_cast<runtime::Buffer>(n->data));
  std::vector<runtime::ScalarArg> scalars;
  scalars.reserve(w.scalars.size());
  for (ir::Node* n : w.scalars) scalars.push_back({n->value, n->ivalue});
  std::vector<runtime::BufferPtr> results;
  {
    metrics::ScopedTimer t(metrics::execute_time);
    results = exe->run(params, scalars, donated);
  }
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
}

std::vector<ir::Node*> roots_of(const std::vector<Tensor>& tensors) {
  std::vector<ir::Node*> roots;
  for (const Tensor& t : tensors) roots.push_back(trace::node_of(t).get());
  return roots;
}

}  // namespace

void clear_caches() {
  compiler::CompileCache::global().clear();
  compiler::clear_body_programs();
}

void sync() {
  trace::sync_named(nullptr, "");
}

void sync(const std::vector<Tensor>& tensors) {
  trace::sync_named(&tensors, "");
}

void trace::sync_named(const std::vector<Tensor>* tensors, const std::string& name) {
  trace::check_not_tracing("sync()");
  if (!tensors) {
    std::lock_guard<std::mutex> lock(g_walk_mutex);
    return sync_impls(trace::pending_tensors(), name);
  }
  std::vector<TensorImpl*> impls;  // the caller's handles keep these alive
  for (const Tensor& t : *tensors) {
    if (!t.defined()) fail("sync", "tensor ", impls.size(), " is undefined (default-constructed).");
    impls.push_back(t.impl().get());
  }
  std::lock_guard<std::mutex> lock(g_walk_mutex);
  sync_impls(impls, name);
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

std::string to_program(const std::vector<Tensor>& tensors) {
  std::unique_lock<std::mutex> lock(g_walk_mutex);
  ir::Graph g = compiler::optimize(ir::build_graph(ir::walk(roots_of(tensors)), "pending"));
  return compiler::describe(compiler::lower(g));
}

}  // namespace debug
}  // namespace lazytrace
