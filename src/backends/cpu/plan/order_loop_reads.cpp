// A program pass (plan/pipeline.cpp runs them in order).
// Requires: the loops' body programs.
// Provides: LoopStep::x_order.
#include <algorithm>
#include <map>
#include <vector>

#include "backends/cpu/plan/pipeline.h"
#include "backends/cpu/plan/walk.h"

namespace lazytrace::cpu::plan {

// Each loop's X inputs in the order its body first reads them (LoopStep::x_order): the
// order in which the backend reads the next iteration's slices ahead.
void order_loop_reads(Program& p, const Context&) {
  for (Step& st : p.steps) {
    auto* l = std::get_if<LoopStep>(&st);
    if (l == nullptr) continue;
    const Program& body = *l->body;
    const std::vector<int> first = storage_uses(body).first;
    std::vector<int> first_of_slot(static_cast<size_t>(body.num_params),
                                   static_cast<int>(body.steps.size()));
    for (size_t s = 0; s < body.storages.size(); ++s)
      if (body.storages[s].kind == StorageKind::Param)
        first_of_slot[static_cast<size_t>(body.storages[s].slot)] = first[s];
    const size_t leaves = l->body_leaves.size();  // the body's inputs come after its leaves
    for (size_t k = 0; k < l->inputs.size(); ++k)
      if (l->inputs[k].role == ir::Loop::Role::X) l->x_order.push_back(static_cast<int>(k));
    std::stable_sort(l->x_order.begin(), l->x_order.end(), [&](int a, int b) {
      return first_of_slot[leaves + static_cast<size_t>(a)] <
             first_of_slot[leaves + static_cast<size_t>(b)];
    });
  }
}

}  // namespace lazytrace::cpu::plan
