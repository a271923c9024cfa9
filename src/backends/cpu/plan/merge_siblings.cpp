// A program pass (plan/pipeline.cpp runs them in order).
// Requires: fused steps in virtual registers, one per instruction (allocate_registers runs
// after it); loop-invariant steps first (hoist_invariants); each storage its own bytes
// (before plan_arena).
// Provides: fewer fused steps, each of their values computed once.
#include <algorithm>
#include <array>
#include <bit>
#include <map>
#include <set>
#include <vector>

#include "backends/cpu/jit_elementwise.h"
#include "backends/cpu/plan/pipeline.h"
#include "backends/cpu/plan/walk.h"
#include "metrics/known.h"

namespace lazytrace::cpu::plan {
namespace {

using ir::OpKind;

bool same_view(const View& a, const View& b) {
  return a.storage == b.storage && a.dtype == b.dtype && a.shape == b.shape &&
         a.strides == b.strides && a.offset == b.offset && a.scalar_slot == b.scalar_slot &&
         std::bit_cast<uint64_t>(a.value) == std::bit_cast<uint64_t>(b.value) &&
         a.ivalue == b.ivalue;
}

// The operations a step computes (not its loads), a silu as the sigmoid and product it is.
int64_t computing(const FusedStep& s) {
  int64_t n = 0;
  for (const Instr& ins : s.program) n += ins.op == OpKind::Silu ? 2 : ins.op != OpKind::Data;
  return n;
}

bool shares_a_load(const FusedStep& a, const FusedStep& b) {
  for (const View& x : a.loads)
    for (const View& y : b.loads)
      if (!x.is_scalar() && same_view(x, y)) return true;
  return false;
}

// silu(x) is x * sigmoid(x) in math.h, rounded once at the end in float32 and float64 (a
// narrower dtype rounds sigmoid(x) first as an op of its own, but not inside silu).
bool silu_is_product(const Instr& ins) {
  return (ins.dtype == DType::float32 || ins.dtype == DType::float64) && ins.in_dtype == ins.dtype;
}

// The step's program again, each value computed once: equal loads and equal instructions on
// equal operands become one; with `sigmoid_of` (values whose sigmoid the step computes),
// silu(x) becomes x * sigmoid(x) on that sigmoid.
FusedStep compute_once(const FusedStep& st, const std::set<int>& sigmoid_of) {
  FusedStep out = st;
  out.loads.clear();
  out.program.clear();
  out.num_regs = 0;
  std::vector<int> value(static_cast<size_t>(st.num_regs), -1);  // old register -> new
  using Key = std::array<int64_t, 9>;
  std::map<Key, int> made;
  auto emit = [&](Instr ins) {
    const Key key{static_cast<int64_t>(ins.op),
                  static_cast<int64_t>(ins.dtype),
                  static_cast<int64_t>(ins.in_dtype),
                  ins.src[0],
                  ins.src[1],
                  ins.src[2],
                  ins.load,
                  std::bit_cast<int64_t>(ins.f[0]),
                  std::bit_cast<int64_t>(ins.f[1])};
    auto [it, fresh] = made.try_emplace(key, out.num_regs);
    if (fresh) {
      ins.dst = out.num_regs++;
      out.program.push_back(ins);
    }
    return it->second;
  };
  for (Instr ins : st.program) {
    const int dst = ins.dst;
    for (int& r : ins.src)
      if (r >= 0) r = value[static_cast<size_t>(r)];
    if (ins.op == OpKind::Data) {
      const View& v = st.loads[static_cast<size_t>(ins.load)];
      auto same = std::find_if(out.loads.begin(), out.loads.end(),
                               [&](const View& w) { return same_view(v, w); });
      ins.load = static_cast<int>(same - out.loads.begin());
      if (same == out.loads.end()) out.loads.push_back(v);
    }
    if (ins.op == OpKind::Silu && silu_is_product(ins) && sigmoid_of.contains(ins.src[0])) {
      Instr sig = ins;
      sig.op = OpKind::Sigmoid;
      ins.op = OpKind::Mul;
      ins.src[1] = emit(sig);
    }
    value[static_cast<size_t>(dst)] = emit(ins);
  }
  for (auto& s : out.stores) s.reg = value[static_cast<size_t>(s.reg)];
  return out;
}

// b's instructions after a's, in one step over their common shape.
FusedStep merged(const FusedStep& a, const FusedStep& b) {
  FusedStep m = a;
  const int reg_base = a.num_regs, load_base = static_cast<int>(a.loads.size());
  m.loads.insert(m.loads.end(), b.loads.begin(), b.loads.end());
  for (Instr ins : b.program) {
    ins.dst += reg_base;
    for (int& r : ins.src)
      if (r >= 0) r += reg_base;
    if (ins.load >= 0) ins.load += load_base;
    m.program.push_back(ins);
  }
  m.num_regs += b.num_regs;
  for (const auto& s : b.stores) m.stores.push_back({s.reg + reg_base, s.dst});
  FusedStep once = compute_once(m, {});
  std::set<int> sigmoid_of;
  for (const Instr& ins : once.program)
    if (ins.op == OpKind::Sigmoid && silu_is_product(ins)) sigmoid_of.insert(ins.src[0]);
  return sigmoid_of.empty() ? once : compute_once(once, sigmoid_of);
}

}  // namespace

// A fused step that computes some of what an earlier fused step of its shape computes joins
// that step, where no step between them writes what it reads or touches what it writes
// (neither step writes what the other reads): one pass over the tiles computes the shared
// values once (the forward's silu(x) and the sigmoid(x) of its saved derivative). Steps that
// share only loads stay apart: one step with more streams runs fewer vectors at a time.
// A step that native code takes stays native: a merge the code generator would not take is
// left undone.
void merge_siblings(Program& p, const Context& c) {
  if (!c.passes.on(runtime::Pass::Fusion)) return;  // each op a step of its own, for an A/B
  const bool jit = c.passes.on(runtime::Pass::JitFused) && jit_available();
  const JitOptions options = jit_options(c.passes);
  std::vector<char> gone(p.steps.size(), 0);
  for (size_t j = 1; j < p.steps.size(); ++j) {
    const auto* b = std::get_if<FusedStep>(&p.steps[j]);
    if (b == nullptr) continue;
    std::vector<int> reads, writes;
    for (const View& v : b->loads)
      if (!v.is_scalar()) reads.push_back(v.storage);
    for (const auto& s : b->stores) writes.push_back(s.dst.storage);
    auto in = [](const std::vector<int>& set, int s) {
      return s >= 0 && std::find(set.begin(), set.end(), s) != set.end();
    };
    const bool invariant = static_cast<int>(j) < p.invariant_steps;
    for (size_t i = j; i-- > 0;) {
      if (gone[i]) continue;
      if ((static_cast<int>(i) < p.invariant_steps) != invariant) break;  // a loop runs apart
      bool blocks = false;
      for_each_view(p.steps[i], [&](int s) { blocks = blocks || in(writes, s); });
      for_each_write(p.steps[i], [&](int s) { blocks = blocks || in(reads, s); });
      if (blocks) break;
      auto* a = std::get_if<FusedStep>(&p.steps[i]);
      if (a == nullptr || !(a->shape == b->shape) || !shares_a_load(*a, *b)) continue;
      FusedStep m = merged(*a, *b);
      if (computing(m) == computing(compute_once(*a, {})) + computing(compute_once(*b, {})))
        break;  // nothing computed once
      if (jit && !compile_jit(m, options) && (compile_jit(*a, options) || compile_jit(*b, options)))
        break;
      *a = std::move(m);
      gone[j] = 1;
      metrics::fused_steps_merged.add();
      break;
    }
  }
  int invariant = 0, kept = 0;
  for (size_t j = 0; j < p.steps.size(); ++j) {
    if (gone[j]) continue;
    if (static_cast<int>(j) < p.invariant_steps) ++invariant;
    if (static_cast<size_t>(kept) != j) p.steps[static_cast<size_t>(kept)] = std::move(p.steps[j]);
    ++kept;
  }
  p.steps.resize(static_cast<size_t>(kept));
  p.invariant_steps = invariant;
}

}  // namespace lazytrace::cpu::plan
