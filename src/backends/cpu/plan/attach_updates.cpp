// A program pass (plan/pipeline.cpp runs them in order).
// Requires: every step sealed, every storage written by one step (before plan_arena).
// Provides: LoopStep::updates; what those updates read is made before the loop.
#include <algorithm>
#include <map>
#include <vector>

#include "backends/cpu/plan/pipeline.h"
#include "backends/cpu/plan/walk.h"
#include "metrics/known.h"

namespace lazytrace::cpu::plan {

// AdamW updates that can run beside a scan (LoopStep::updates): an update whose gradient
// is a product of two of the scan's ys, batch i of it made of slice i of each, and whose
// other operands (parameter, moments, the step's scalars) do not depend on the scan. The
// steps that make those scalars move before the scan; the update moves into it. Runs before
// the arena is planned, while every storage is still written by one step.
void attach_updates(Program& p, const Context&) {
  const size_t ns = p.storages.size();
  auto writes = [](const Step& st) {
    std::vector<int> w;
    for_each_write(st, [&](int s) {
      if (s >= 0) w.push_back(s);
    });
    return w;
  };
  auto reads = [&](const Step& st) {
    const std::vector<int> w = writes(st);
    std::vector<int> r;
    for_each_view(st, [&](int s) {
      if (s >= 0 && std::find(w.begin(), w.end(), s) == w.end()) r.push_back(s);
    });
    return r;
  };
  for (size_t li = 0; li < p.steps.size(); ++li) {
    auto* loop = std::get_if<LoopStep>(&p.steps[li]);
    if (!loop || loop->kind != ir::Loop::Kind::Scan || loop->length <= 0) continue;
    // ys: loop output storage -> elements per slice
    std::map<int, int64_t> ys;
    for (size_t r = loop->spare.size(); r < loop->outputs.size(); ++r)
      ys[loop->outputs[r]] = loop->body->results[r].shape.numel();
    auto slice_of_ys = [&](const View& v) {  // batch i of v is slice i of a ys storage
      auto it = ys.find(v.storage);
      return it != ys.end() && v.shape.size() == 3 && v.shape[0] == loop->length && v.offset == 0 &&
             v.strides[0] == it->second;
    };
    std::vector<char> tainted(ns, 0);  // written by the loop, or by a step that reads one
    for (int s : writes(*loop)) tainted[static_cast<size_t>(s)] = 1;
    std::vector<char> attach(p.steps.size(), 0), hoist(p.steps.size(), 0);
    std::vector<char> needed(ns, 0);  // read by an attached update, made after the loop
    for (size_t k = li + 1; k < p.steps.size(); ++k) {
      const Step& st = p.steps[k];
      const auto* a = std::get_if<AdamWStep>(&st);
      bool dep = false;
      if (a && a->grad_product && a->grad_product->out_shape.size() == 3 &&
          a->grad_product->out_shape[0] == loop->length && slice_of_ys(a->grad_product->a) &&
          slice_of_ys(a->grad_product->b)) {
        bool free = true;  // (a clipping factor from a norm of the loop's gradients is not)
        const std::vector<const View*> operands = adamw_operands(*a);
        for (const View* v : operands)
          if (!v->is_scalar() && tainted[static_cast<size_t>(v->storage)]) free = false;
        if (free) {
          attach[k] = 1;
          for (const View* v : operands)
            if (!v->is_scalar()) needed[static_cast<size_t>(v->storage)] = 1;
        }
        dep = true;
      } else {
        for (int s : reads(st))
          if (tainted[static_cast<size_t>(s)]) dep = true;
      }
      if (dep)
        for (int s : writes(st)) tainted[static_cast<size_t>(s)] = 1;
    }
    // the steps after the loop that make what the attached updates read (none depends on
    // the loop, or the update would not have been attached)
    for (size_t k = p.steps.size(); k-- > li + 1;) {
      if (attach[k]) continue;
      bool makes = false;
      for (int s : writes(p.steps[k]))
        if (needed[static_cast<size_t>(s)]) makes = true;
      if (!makes) continue;
      hoist[k] = 1;
      for (int s : reads(p.steps[k])) needed[static_cast<size_t>(s)] = 1;
    }
    if (std::find(attach.begin(), attach.end(), 1) == attach.end()) continue;
    std::vector<Step> before, after;
    LoopStep moved = std::move(*loop);
    for (size_t k = li + 1; k < p.steps.size(); ++k) {
      if (attach[k])
        moved.updates.push_back(std::move(std::get<AdamWStep>(p.steps[k])));
      else
        (hoist[k] ? before : after).push_back(std::move(p.steps[k]));
    }
    p.steps.resize(li);
    for (Step& st : before) p.steps.push_back(std::move(st));
    li = p.steps.size();
    metrics::updates_beside_loops.add(static_cast<int64_t>(moved.updates.size()));
    p.steps.emplace_back(std::move(moved));
    for (Step& st : after) p.steps.push_back(std::move(st));
  }
}

}  // namespace lazytrace::cpu::plan
