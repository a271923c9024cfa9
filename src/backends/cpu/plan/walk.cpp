#include "backends/cpu/plan/walk.h"

#include <algorithm>

namespace lazytrace::cpu::plan {

std::pair<std::vector<int>, std::vector<int>> storage_uses(const Program& p) {
  const int nsteps = static_cast<int>(p.steps.size());
  std::vector<int> first(p.storages.size(), nsteps), last(p.storages.size(), -1);
  for (int i = 0; i < nsteps; ++i)
    for_each_view(p.steps[i], [&](int s) {
      if (s < 0) return;
      first[s] = std::min(first[s], i);
      last[s] = std::max(last[s], i);
      if (i < p.invariant_steps && p.storages[s].kind == StorageKind::Arena) last[s] = nsteps - 1;
    });
  return {std::move(first), std::move(last)};
}

}  // namespace lazytrace::cpu::plan
