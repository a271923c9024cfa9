#pragma once
// CompileCache: executables keyed by graph structure, bounded by LRU.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "core/lru_cache.h"
#include "ir/graph.h"
#include "runtime/device.h"

namespace lazytrace::compiler {

/** What an executable's caller must supply; checked on every hit as a guard on the key. */
struct GraphShape {
  size_t params = 0, scalars = 0, results = 0, nodes = 0;
  bool operator==(const GraphShape&) const = default;
};

/** The bound of the compile cache and of the compiled bodies: LAZYTRACE_COMPILE_CACHE_SIZE,
 * else 1024. */
size_t compile_cache_capacity();

class CompileCache {
 public:
  /** Capacity from LAZYTRACE_COMPILE_CACHE_SIZE (default 1024). */
  CompileCache();

  /** The executable cached for `key` (a hit), or null. */
  std::shared_ptr<runtime::Executable> find(uint64_t key, const GraphShape& shape);
  /** Optimizes, verifies and compiles `g` for `device` with `passes` (a miss), and caches
   * it under `key`, which must tell devices and pass sets apart. Runs without the cache's
   * lock held: other threads' lookups and compiles go on. */
  std::shared_ptr<runtime::Executable> compile(uint64_t key, const GraphShape& shape,
                                               runtime::Device& device, ir::Graph g,
                                               runtime::PassSet passes = {});
  /** find, else compile what `build_graph()` makes. */
  std::shared_ptr<runtime::Executable> get_or_compile(uint64_t key, const GraphShape& shape,
                                                      runtime::Device& device,
                                                      const std::function<ir::Graph()>& build_graph,
                                                      runtime::PassSet passes = {});

  size_t size() const;
  /** Bytes of the scratch arenas (every intermediate of a graph) the executables take for a
   * run (from the buffer cache; none is held between runs). */
  int64_t arena_bytes() const;
  size_t capacity() const;
  void set_capacity(size_t n);
  void clear();

  /** The process-wide cache used by sync(). */
  static CompileCache& global();

 private:
  struct Entry {
    std::shared_ptr<runtime::Executable> exe;
    GraphShape shape;
  };
  mutable std::mutex mu_;
  LruCache<Entry> entries_;
  // node descriptions of recent graphs, kept only while explaining misses
  std::vector<std::vector<std::string>> explained_;
};

}  // namespace lazytrace::compiler
