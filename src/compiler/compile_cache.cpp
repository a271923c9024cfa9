#include "compiler/compile_cache.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "compiler/passes.h"
#include "lazytrace/metrics/metrics.h"
#include "metrics/known.h"

namespace lazytrace::compiler {
namespace {

void save_graph(const ir::Graph& g) {
  const char* dir = std::getenv("LAZYTRACE_SAVE_GRAPHS");
  if (!dir || !*dir) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  static std::atomic<int> counter{0};
  char name[96];
  std::snprintf(name, sizeof name, "graph_%04d_%016llx", counter.fetch_add(1),
                static_cast<unsigned long long>(g.key));
  std::string base = std::string(dir) + "/" + (g.name.empty() ? "" : g.name + "_") + name;
  std::ofstream(base + ".txt") << ir::to_text(g);
  std::ofstream(base + ".dot") << ir::to_dot(g);
}

std::vector<std::string> node_lines(const ir::Graph& g) {
  std::vector<std::string> out;
  out.reserve(g.nodes.size());
  for (const ir::GNode& n : g.nodes) {
    std::string s = ir::op_name(n.op);
    s.append(" ").append(dtype_short(n.dtype)).append(n.shape.str());
    out.push_back(std::move(s));
  }
  return out;
}

// LAZYTRACE_EXPLAIN_CACHE_MISSES: why a graph was compiled, against the graphs compiled
// before (the closest by common prefix of nodes).
void explain_miss(const ir::Graph& g, std::vector<std::vector<std::string>>& seen) {
  const char* flag = std::getenv("LAZYTRACE_EXPLAIN_CACHE_MISSES");
  if (!flag || !*flag || std::string(flag) == "0") return;
  std::vector<std::string> lines = node_lines(g);
  std::string why = "no graph was compiled before";
  size_t best = 0, best_len = 0;
  for (size_t i = 0; i < seen.size(); ++i) {
    size_t k = 0;
    while (k < lines.size() && k < seen[i].size() && lines[k] == seen[i][k]) ++k;
    if (i == 0 || k > best_len) {
      best = i;
      best_len = k;
    }
  }
  if (!seen.empty()) {
    const auto& near = seen[best];
    if (best_len < lines.size() && best_len < near.size())
      why = "node %" + std::to_string(best_len) + " is " + lines[best_len] +
            ", the closest compiled graph has " + near[best_len] + " there";
    else if (lines.size() != near.size())
      why = "it has " + std::to_string(lines.size()) + " nodes, the closest compiled graph " +
            std::to_string(near.size()) + " with the same first ones";
    else
      why = "the closest compiled graph has the same nodes, connected differently";
  }
  std::fprintf(stderr, "[compile cache] miss for graph%s%s (%zu nodes, %zu inputs): %s\n",
               g.name.empty() ? "" : " '", g.name.empty() ? "" : (g.name + "'").c_str(),
               lines.size(), g.param_nodes.size(), why.c_str());
  seen.push_back(std::move(lines));
  if (seen.size() > 64) seen.erase(seen.begin());
}

}  // namespace

size_t compile_cache_capacity() {
  const char* e = std::getenv("LAZYTRACE_COMPILE_CACHE_SIZE");
  const long v = e ? std::atol(e) : 0;
  return v > 0 ? static_cast<size_t>(v) : 1024;
}

CompileCache::CompileCache() : entries_(compile_cache_capacity()) {}

std::shared_ptr<runtime::Executable> CompileCache::find(uint64_t key, const GraphShape& shape) {
  std::lock_guard<std::mutex> lock(mu_);
  // a 64-bit key could collide: an entry that takes other arguments is not this graph
  Entry* e = entries_.find(key);
  if (!e || !(e->shape == shape)) return nullptr;
  metrics::cache_hit.add();
  return e->exe;
}

std::shared_ptr<runtime::Executable> CompileCache::compile(uint64_t key, const GraphShape& shape,
                                                           runtime::Device& device, ir::Graph g,
                                                           runtime::PassSet passes) {
  metrics::cache_miss.add();
  std::shared_ptr<runtime::Executable> exe;
  {
    metrics::ScopedTimer t(metrics::compile_time);
    save_graph(g);
    {
      std::lock_guard<std::mutex> lock(mu_);
      explain_miss(g, explained_);
    }
    ir::Graph opt = optimize(g, passes);
    ir::verify(opt);
    exe = device.compile(opt, passes);
    metrics::compile_count.add();
  }
  std::lock_guard<std::mutex> lock(mu_);
  // another thread may have compiled the same graph meanwhile: keep one
  if (Entry* e = entries_.find(key); e && e->shape == shape) return e->exe;
  metrics::cache_evictions.add(static_cast<int64_t>(entries_.insert(key, Entry{exe, shape})));
  return exe;
}

std::shared_ptr<runtime::Executable> CompileCache::get_or_compile(
    uint64_t key, const GraphShape& shape, runtime::Device& device,
    const std::function<ir::Graph()>& build_graph, runtime::PassSet passes) {
  if (auto exe = find(key, shape)) return exe;
  return compile(key, shape, device, build_graph(), passes);
}

int64_t CompileCache::arena_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t total = 0;
  entries_.for_each([&](uint64_t, const Entry& e) { total += e.exe->arena_bytes(); });
  return total;
}

size_t CompileCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

size_t CompileCache::capacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.capacity();
}

void CompileCache::set_capacity(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  metrics::cache_evictions.add(static_cast<int64_t>(entries_.set_capacity(n)));
}

void CompileCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
}

CompileCache& CompileCache::global() {
  static CompileCache* c = new CompileCache();
  return *c;
}

}  // namespace lazytrace::compiler
