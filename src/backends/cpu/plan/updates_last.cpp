// A program pass (plan/pipeline.cpp runs them in order).
// Requires: no step writes a parameter's storage, and an update's outputs are written by it
// alone (before plan_arena).
// Provides: each AdamW update after the last step that reads its parameter or moments.
#include <algorithm>
#include <tuple>
#include <vector>

#include "backends/cpu/plan/pipeline.h"
#include "backends/cpu/plan/walk.h"

namespace lazytrace::cpu::plan {

// An update made where its gradient is (the gradient's product runs inside it) comes before
// the steps that still read the old weight in an unrolled backward (a layer's dX = dY W
// after its dW), and its new weight then cannot take the old one's buffer (find_donations).
// Each update whose parameter or moments a later step reads moves to just after the last
// such step, where no step between reads what it writes. The steps' order is all that
// changes: every step computes the same values.
void updates_last(Program& p, const Context&) {
  const int nsteps = static_cast<int>(p.steps.size());
  const size_t ns = p.storages.size();
  // per storage: the last step that reads it, and the first
  std::vector<int> last_read(ns, -1), first_read(ns, nsteps);
  std::vector<int> written;
  for (int i = 0; i < nsteps; ++i) {
    written.clear();
    for_each_write(p.steps[i], [&](int s) { written.push_back(s); });
    for_each_view(p.steps[i], [&](int s) {
      if (s < 0 || std::find(written.begin(), written.end(), s) != written.end()) return;
      last_read[s] = std::max(last_read[s], i);
      first_read[s] = std::min(first_read[s], i);
    });
  }
  // each step's place: (after which step, moved, its index)
  std::vector<std::tuple<int, int, int>> place(static_cast<size_t>(nsteps));
  bool moved = false;
  for (int i = 0; i < nsteps; ++i) {
    place[i] = {i, 0, i};
    const auto* a = std::get_if<AdamWStep>(&p.steps[i]);
    if (!a) continue;
    int after = i;
    for (const View* v : {&a->param, &a->exp_avg, &a->exp_avg_sq})
      if (!v->is_scalar() && p.storages[v->storage].kind == StorageKind::Param)
        after = std::max(after, last_read[v->storage]);
    int first_reader = nsteps;
    for (int o : a->out) first_reader = std::min(first_reader, first_read[o]);
    if (after > i && first_reader > after) {
      place[i] = {after, 1, i};
      moved = true;
    }
  }
  if (!moved) return;
  std::sort(place.begin(), place.end());
  std::vector<Step> steps;
  steps.reserve(p.steps.size());
  for (const auto& t : place) steps.push_back(std::move(p.steps[std::get<2>(t)]));
  p.steps = std::move(steps);
}

}  // namespace lazytrace::cpu::plan
