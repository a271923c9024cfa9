#include "compiler/compile_cache.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "compiler/program.h"
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

}  // namespace

CompileCache::CompileCache() {
  capacity_ = 1024;
  if (const char* e = std::getenv("LAZYTRACE_COMPILE_CACHE_SIZE")) {
    long v = std::atol(e);
    if (v > 0) capacity_ = static_cast<size_t>(v);
  }
}

std::shared_ptr<runtime::Executable> CompileCache::get_or_compile(
    uint64_t key, const GraphShape& shape, runtime::Device& device,
    const std::function<ir::Graph()>& build_graph) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    // a 64-bit key could collide: an entry that takes other arguments is not this graph
    if (it != map_.end() && !(it->second.shape == shape)) {
      lru_.erase(it->second.pos);
      map_.erase(it);
      it = map_.end();
    }
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.pos);
      metrics::cache_hit.add();
      return it->second.exe;
    }
  }
  metrics::cache_miss.add();
  std::shared_ptr<runtime::Executable> exe;
  {
    metrics::ScopedTimer t(metrics::compile_time);
    ir::Graph g = build_graph();
    save_graph(g);
    ir::Graph opt = optimize(g);
    ir::verify(opt);
    exe = device.compile(opt);
    metrics::compile_count.add();
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it != map_.end() && it->second.shape == shape) return it->second.exe;
  if (it != map_.end()) {
    lru_.erase(it->second.pos);
    map_.erase(it);
  }
  lru_.push_front(key);
  map_[key] = Entry{exe, shape, lru_.begin()};
  evict_locked();
  return exe;
}

void CompileCache::evict_locked() {
  while (map_.size() > capacity_) {
    map_.erase(lru_.back());
    lru_.pop_back();
    metrics::cache_evictions.add();
  }
}

size_t CompileCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

void CompileCache::set_capacity(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = n == 0 ? 1 : n;
  evict_locked();
}

void CompileCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  map_.clear();
  lru_.clear();
}

CompileCache& CompileCache::global() {
  static CompileCache* c = new CompileCache();
  return *c;
}

}  // namespace lazytrace::compiler
