// A program pass (plan/pipeline.cpp runs them in order).
// Requires: the final order of the steps.
// Provides: Storage::offset of every arena storage, Program::arena_bytes.
#include <algorithm>
#include <map>
#include <vector>

#include "backends/cpu/plan/pipeline.h"
#include "backends/cpu/plan/walk.h"

namespace lazytrace::cpu::plan {

// Liveness-based best-fit placement of arena storages: a storage is placed before the
// first step that touches it and freed after the last, so steps never overlap their
// inputs with their outputs.
void plan_arena(Program& p, const Context& c) {
  const bool reuse = c.passes.on(runtime::Pass::ArenaReuse);
  const int ns = static_cast<int>(p.storages.size());
  const int nsteps = static_cast<int>(p.steps.size());
  const auto [first, last] = storage_uses(p);
  std::vector<std::vector<int>> starts(nsteps), ends(nsteps);
  for (int s = 0; s < ns; ++s)
    if (p.storages[s].kind == StorageKind::Arena && last[s] >= 0) {
      starts[first[s]].push_back(s);
      ends[last[s]].push_back(s);
    }
  std::map<int64_t, int64_t> free_blocks;  // offset -> size
  int64_t top = 0;
  auto align = [](int64_t b) { return (std::max<int64_t>(b, 1) + 63) / 64 * 64; };
  for (int i = 0; i < nsteps; ++i) {
    for (int s : starts[i]) {
      int64_t need = align(p.storages[s].bytes);
      auto best = free_blocks.end();
      for (auto it = free_blocks.begin(); it != free_blocks.end(); ++it)
        if (it->second >= need && (best == free_blocks.end() || it->second < best->second))
          best = it;
      if (best != free_blocks.end()) {
        p.storages[s].offset = best->first;
        int64_t rest = best->second - need, off = best->first + need;
        free_blocks.erase(best);
        if (rest > 0) free_blocks[off] = rest;
      } else {
        p.storages[s].offset = top;
        top += need;
      }
    }
    for (int s : ends[i]) {
      if (!reuse) break;  // freed memory is never given to another storage
      int64_t off = p.storages[s].offset, size = align(p.storages[s].bytes);
      auto next = free_blocks.find(off + size);
      if (next != free_blocks.end()) {
        size += next->second;
        free_blocks.erase(next);
      }
      auto it = free_blocks.lower_bound(off);
      if (it != free_blocks.begin()) {
        auto prev = std::prev(it);
        if (prev->first + prev->second == off) {
          prev->second += size;
          continue;
        }
      }
      free_blocks[off] = size;
    }
  }
  p.arena_bytes = top;
}

}  // namespace lazytrace::cpu::plan
