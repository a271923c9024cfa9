// A program pass (plan/pipeline.cpp runs them in order).
// Requires: a body's program (Context::first_input >= 0).
// Provides: Program::invariant_steps, those steps first.
#include <algorithm>
#include <map>
#include <vector>

#include "backends/cpu/plan/pipeline.h"
#include "backends/cpu/plan/walk.h"

namespace lazytrace::cpu::plan {

// Loop-invariant steps (Program::invariant_steps), in a body's program: the steps that read
// none of the body's inputs, only its own leaves, scalars and what other such steps wrote
// (a layer's rotary tables and causal mask), move to the front, and a loop runs them once
// before its first iteration (XLA's while-loop invariant code motion, a step at a time).
// Only arena writes move: the body's results are written where each iteration says.
void hoist_invariants(Program& p, const Context& c) {
  if (c.first_input < 0) return;
  const size_t ns = p.storages.size();
  std::vector<int> writers(ns, 0), invariant_writers(ns, 0);
  for (const Step& st : p.steps)
    for_each_write(st, [&](int s) {
      if (s >= 0) ++writers[static_cast<size_t>(s)];
    });
  auto invariant = [&](int s) {
    const Storage& st = p.storages[static_cast<size_t>(s)];
    if (st.kind == StorageKind::Param) return st.slot < c.first_input;
    return writers[static_cast<size_t>(s)] > 0 &&
           invariant_writers[static_cast<size_t>(s)] == writers[static_cast<size_t>(s)];
  };
  std::vector<Step> front, rest;
  for (Step& st : p.steps) {
    // what the step reads; only these kinds of step move (loops, calls and updates stay)
    bool hoist = true;
    std::vector<const View*> reads;
    if (const auto* f = std::get_if<FusedStep>(&st)) {
      for (const View& v : f->loads) reads.push_back(&v);
    } else if (const auto* r = std::get_if<ReduceStep>(&st)) {
      reads = {&r->in};
    } else if (const auto* m = std::get_if<MatmulStep>(&st)) {
      reads = {&m->a, &m->b};
    } else if (const auto* g = std::get_if<GatherStep>(&st)) {
      reads = {&g->in, &g->index};
      if (g->source) reads.push_back(&*g->source);
    } else if (const auto* c = std::get_if<CheckStep>(&st)) {
      reads = {&c->targets};
    } else {
      hoist = false;
    }
    for (const View* v : reads) hoist = hoist && (v->is_scalar() || invariant(v->storage));
    std::vector<int> writes;
    for_each_write(st, [&](int s) {
      writes.push_back(s);
      hoist = hoist && s >= 0 && p.storages[static_cast<size_t>(s)].kind == StorageKind::Arena;
    });
    if (!hoist) {
      rest.push_back(std::move(st));
      continue;
    }
    for (int s : writes) ++invariant_writers[static_cast<size_t>(s)];
    front.push_back(std::move(st));
  }
  p.invariant_steps = static_cast<int>(front.size());
  for (Step& st : rest) front.push_back(std::move(st));
  p.steps = std::move(front);
}

}  // namespace lazytrace::cpu::plan
