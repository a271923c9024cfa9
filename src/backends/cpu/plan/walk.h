#pragma once
// What the program passes ask of every step: the storages it touches and the ones it writes,
// through std::visit, so a new step kind is a build error here until it is described.
#include <algorithm>
#include <utility>
#include <variant>
#include <vector>

#include "backends/cpu/program.h"
#include "core/overload.h"

namespace lazytrace::cpu::plan {

/** The views an update reads beside its gradient (or its gradient's product): parameter,
 * moments, its numbers and the gradient's factor if it has one. */
inline std::vector<const View*> adamw_operands(const AdamWStep& a) {
  std::vector<const View*> v = {&a.param, &a.exp_avg,   &a.exp_avg_sq,
                                &a.decay, &a.step_size, &a.inv_sqrt_bc2};
  if (a.grad_scale) v.push_back(&*a.grad_scale);
  return v;
}

/** Every storage an update names (its gradient product's operands included). */
template <typename F>
void adamw_views(const AdamWStep& a, F&& f) {
  if (!a.grad.is_scalar()) f(a.grad.storage);
  for (const View* v : adamw_operands(a))
    if (!v->is_scalar()) f(v->storage);
  if (a.grad_product) {
    f(a.grad_product->a.storage);
    f(a.grad_product->b.storage);
  }
  for (int o : a.out) f(o);
}

/** Every storage a step names (-1 where a view is a scalar or a part is absent). */
template <typename F>
void for_each_view(const Step& step, F&& f) {
  std::visit(Overload{
                 [&](const FusedStep& s) {
                   for (const View& v : s.loads) f(v.storage);
                   for (const auto& st : s.stores) f(st.dst.storage);
                 },
                 [&](const ReduceStep& r) {
                   f(r.in.storage);
                   f(r.out_storage);
                 },
                 [&](const MatmulStep& m) {
                   f(m.a.storage);
                   f(m.b.storage);
                   f(m.out_storage);
                 },
                 [&](const GatherStep& g) {
                   f(g.in.storage);
                   f(g.index.storage);
                   if (g.source) f(g.source->storage);
                   f(g.out_storage);
                 },
                 [&](const CheckStep& c) { f(c.targets.storage); },
                 [&](const CallStep& c) {
                   for (const View& v : c.params) f(v.storage);
                   for (int o : c.outputs) f(o);
                   f(c.scratch);
                 },
                 [&](const LoopStep& l) {
                   for (const LoopStep::Input& in : l.inputs) {
                     f(in.view.storage);
                     for (const View& v : in.slices) f(v.storage);
                   }
                   for (const View& v : l.body_leaves) f(v.storage);
                   for (const View& v : l.cond_leaves) f(v.storage);
                   for (int o : l.outputs) f(o);
                   for (int o : l.spare) f(o);
                   f(l.scratch);
                   f(l.cond_scratch);
                   for (const AdamWStep& a : l.updates) adamw_views(a, f);
                   for (const LoopStep::Collective& c : l.collectives) {
                     f(c.step.in.storage);
                     f(c.step.out_storage);
                     for (const auto& part : c.parts) f(part.src);
                   }
                 },
                 [&](const AdamWStep& a) { adamw_views(a, f); },
                 [&](const CollectiveStep& c) {
                   f(c.in.storage);
                   f(c.out_storage);
                   for (int k : c.keeps) f(k);
                 },
             },
             step);
}

/** The storages a step writes (every other storage it names, it only reads). */
template <typename F>
void for_each_write(const Step& step, F&& f) {
  std::visit(Overload{
                 [&](const FusedStep& s) {
                   for (const auto& st : s.stores) f(st.dst.storage);
                 },
                 [&](const ReduceStep& r) { f(r.out_storage); },
                 [&](const MatmulStep& m) { f(m.out_storage); },
                 [&](const GatherStep& g) { f(g.out_storage); },
                 [](const CheckStep&) {},
                 [&](const CallStep& c) {
                   for (int o : c.outputs) f(o);
                   f(c.scratch);
                 },
                 [&](const LoopStep& l) {
                   for (int o : l.outputs) f(o);
                   for (int o : l.spare) f(o);
                   f(l.scratch);
                   f(l.cond_scratch);
                   for (const AdamWStep& a : l.updates)
                     for (int o : a.out) f(o);
                   for (const LoopStep::Collective& c : l.collectives) {
                     f(c.step.out_storage);
                     // (a cast part rounds its slices into the collective's input)
                     if (std::any_of(c.parts.begin(), c.parts.end(),
                                     [](const auto& part) { return part.narrowed; }))
                       f(c.step.in.storage);
                   }
                 },
                 [&](const AdamWStep& a) {
                   for (int o : a.out) f(o);
                 },
                 [&](const CollectiveStep& c) { f(c.out_storage); },
             },
             step);
}

/** The first and last step touching each storage (steps.size() and -1: none). What a
 * loop-invariant step touches in the arena is used by every step: a loop runs those steps
 * only before its first iteration. */
std::pair<std::vector<int>, std::vector<int>> storage_uses(const Program& p);

}  // namespace lazytrace::cpu::plan
