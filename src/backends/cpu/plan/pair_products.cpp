// A program pass (plan/pipeline.cpp runs them in order).
// Requires: arena offsets (plan_arena): storages freed by one step may be the next one's.
// Provides: MatmulStep::beside_next.
#include <algorithm>
#include <map>
#include <vector>

#include "backends/cpu/plan/pipeline.h"
#include "backends/cpu/plan/walk.h"

namespace lazytrace::cpu::plan {

// Adjacent products that may run at the same time (MatmulStep::beside_next), once the arena
// is planned: an arena storage freed after one step may be the next step's output, so the
// check is on the bytes each touches, not only on storage ids.
void pair_products(Program& p, const Context&) {
  auto overlap = [&](int x, int y) {
    if (x == y) return true;
    const Storage& a = p.storages[static_cast<size_t>(x)];
    const Storage& b = p.storages[static_cast<size_t>(y)];
    if (a.kind != StorageKind::Arena || b.kind != StorageKind::Arena) return false;
    return a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
  };
  for (size_t i = 0; i + 1 < p.steps.size(); ++i) {
    if (static_cast<int>(i) + 1 == p.invariant_steps) continue;  // a loop runs those apart
    auto* x = std::get_if<MatmulStep>(&p.steps[i]);
    const auto* y = std::get_if<MatmulStep>(&p.steps[i + 1]);
    if (x == nullptr || y == nullptr) continue;
    const int xo = x->out_storage, yo = y->out_storage;
    if (overlap(xo, y->a.storage) || overlap(xo, y->b.storage) || overlap(xo, yo) ||
        overlap(yo, x->a.storage) || overlap(yo, x->b.storage))
      continue;
    x->beside_next = true;
    ++i;  // pairs, not chains
  }
}

}  // namespace lazytrace::cpu::plan
