// A program pass (plan/pipeline.cpp runs them in order).
// Requires: the final order of the steps.
// Provides: Program::donations.
#include <algorithm>
#include <map>
#include <vector>

#include "backends/cpu/plan/pipeline.h"
#include "backends/cpu/plan/walk.h"
#include "backends/cpu/views.h"

namespace lazytrace::cpu::plan {

// Outputs that can take a parameter's buffer (Program::donations): written by a fused step
// or an AdamW update, the step that reads that parameter last, at the same positions in the
// same layout (each tile, or element, is read before it is written). A parameter that is
// also a result, read in another layout by the same step, or stored by it as loaded, is
// never given.
void find_donations(Program& p, const Context&) {
  const int ns = static_cast<int>(p.storages.size());
  const int nsteps = static_cast<int>(p.steps.size());
  const auto uses = storage_uses(p);
  const auto& first = uses.first;  // named, not bound: lambdas below read them
  const auto& last = uses.second;
  std::vector<char> taken(ns, 0);
  for (const ResultBinding& b : p.results)  // a parameter handed back as a result is kept
    if (p.storages[b.storage].kind == StorageKind::Param) taken[b.storage] = 1;
  auto same_layout = [](const View& a, const View& b) {
    return !a.is_scalar() && !b.is_scalar() && a.dtype == b.dtype && a.shape == b.shape &&
           a.strides == b.strides && a.offset == b.offset;
  };
  // `reads`: every view of the parameter's storage that step i reads
  auto consider = [&](int i, const View& out, const View& in,
                      const std::vector<const View*>& reads) {
    if (out.is_scalar() || in.is_scalar()) return;
    const Storage &so = p.storages[out.storage], &sp = p.storages[in.storage];
    if (so.kind != StorageKind::Output || sp.kind != StorageKind::Param || so.bytes != sp.bytes ||
        first[out.storage] != i || last[in.storage] != i || taken[out.storage] || taken[in.storage])
      return;
    for (const View* r : reads)
      if (!same_layout(*r, out)) return;
    taken[out.storage] = taken[in.storage] = 1;
    p.donations.push_back({so.slot, sp.slot});
  };
  for (int i = 0; i < nsteps; ++i) {
    if (auto* a = std::get_if<AdamWStep>(&p.steps[i])) {
      const View* in[] = {&a->param, &a->exp_avg, &a->exp_avg_sq};
      const View all[] = {a->param, a->grad, a->exp_avg, a->exp_avg_sq};
      for (int k = 0; k < 3; ++k) {
        if (a->grad_product && (a->grad_product->a.storage == in[k]->storage ||
                                a->grad_product->b.storage == in[k]->storage))
          continue;  // the product's factors are read out of order: never given
        std::vector<const View*> reads;
        for (const View& v : all)
          if (v.storage == in[k]->storage) reads.push_back(&v);
        consider(i, contiguous_view(a->out[k], in[k]->dtype, in[k]->shape), *in[k], reads);
      }
    } else if (auto* l = std::get_if<LoopStep>(&p.steps[i])) {
      // An update beside the loop may write a parameter's buffer that the loop reads only
      // as xs in the update's layout: iteration j reads slice j before batch j is updated.
      for (const AdamWStep& a : l->updates) {
        const View* in[] = {&a.param, &a.exp_avg, &a.exp_avg_sq};
        for (int k = 0; k < 3; ++k) {
          const int s = in[k]->storage;
          std::vector<const View*> reads;
          bool only_xs = s != a.grad_product->a.storage && s != a.grad_product->b.storage;
          for (const LoopStep::Input& x : l->inputs) {
            if (x.view.storage == s) {
              if (x.role == ir::Loop::Role::X && x.slices.empty())
                reads.push_back(&x.view);
              else
                only_xs = false;
            }
            for (const View& v : x.slices) only_xs = only_xs && v.storage != s;
          }
          for (const auto* leaves : {&l->body_leaves, &l->cond_leaves})
            for (const View& v : *leaves) only_xs = only_xs && v.storage != s;
          for (const AdamWStep& b : l->updates)
            if (&b != &a) adamw_views(b, [&](int t) { only_xs = only_xs && t != s; });
          for (const View* v : {&a.param, &a.exp_avg, &a.exp_avg_sq})
            if (v->storage == s) reads.push_back(v);
          if (only_xs)
            consider(i, contiguous_view(a.out[k], in[k]->dtype, in[k]->shape), *in[k], reads);
        }
      }
    } else if (auto* f = std::get_if<FusedStep>(&p.steps[i])) {
      // A store of a value as it was loaded (a copy beside other stores) reads the load's
      // memory after the stores before it: that memory is no output's.
      std::vector<int> stored_as_loaded;
      for (const auto& st : f->stores) {
        const Instr* last = nullptr;  // the register's value when the stores run
        for (const Instr& ins : f->program)
          if (ins.dst == st.reg) last = &ins;
        if (last && last->op == ir::OpKind::Data) {
          const View& v = f->loads[static_cast<size_t>(last->load)];
          if (!v.is_scalar()) stored_as_loaded.push_back(v.storage);
        }
      }
      for (const auto& st : f->stores)
        for (const View& in : f->loads) {
          if (in.is_scalar() || std::ranges::count(stored_as_loaded, in.storage) > 0) continue;
          std::vector<const View*> reads;
          for (const View& v : f->loads)
            if (!v.is_scalar() && v.storage == in.storage) reads.push_back(&v);
          consider(i, st.dst, in, reads);
        }
    }
  }
}

}  // namespace lazytrace::cpu::plan
