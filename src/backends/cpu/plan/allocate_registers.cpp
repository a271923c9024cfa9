// A program stage (plan/pipeline.cpp runs them in order), always run.
// Requires: fused steps in virtual registers, one per instruction (as lowering makes them).
// Provides: FusedStep::num_regs physical registers, each instruction's dst and src among them.
#include <vector>

#include "backends/cpu/plan/pipeline.h"

namespace lazytrace::cpu::plan {
namespace {

void allocate(FusedStep& st) {
  const int nv = st.num_regs, end = static_cast<int>(st.program.size());
  std::vector<int> last_use(nv, -1), phys(nv, -1), free_regs;
  for (int i = 0; i < end; ++i)
    for (int v : st.program[i].src)
      if (v >= 0) last_use[v] = i;
  for (auto& store : st.stores) last_use[store.reg] = end;
  int used = 0;
  // A result may take a dying operand's register (kernels read element j before writing
  // it) only when both have the same lane width: float32 lanes are 4 bytes, others 8.
  auto width = [](DType d) { return is_floating(d) && d != DType::float64 ? 4 : 8; };
  std::vector<int> dying, deferred;
  for (int i = 0; i < end; ++i) {
    Instr& ins = st.program[i];
    const int vsrc[3] = {ins.src[0], ins.src[1], ins.src[2]};
    dying.clear();
    deferred.clear();
    for (int k = 0; k < 3; ++k) {
      int v = vsrc[k];
      if (v < 0) continue;
      ins.src[k] = phys[v];
      bool repeated = false;
      for (int j = 0; j < k; ++j) repeated |= vsrc[j] == v;
      if (repeated || last_use[v] != i) continue;
      DType operand = (ins.op == ir::OpKind::Where && k == 0) ? DType::bool_ : ins.in_dtype;
      (width(operand) == width(ins.dtype) ? dying : deferred).push_back(phys[v]);
    }
    free_regs.insert(free_regs.end(), dying.begin(), dying.end());
    int v = ins.dst;
    int p;
    if (!free_regs.empty()) {
      p = free_regs.back();
      free_regs.pop_back();
    } else {
      p = used++;
    }
    phys[v] = p;
    ins.dst = p;
    free_regs.insert(free_regs.end(), deferred.begin(), deferred.end());
    if (last_use[v] < 0) free_regs.push_back(p);
  }
  for (auto& store : st.stores) store.reg = phys[store.reg];
  st.num_regs = used;
}

}  // namespace

// Maps each fused step's virtual registers to a few physical ones by liveness, so a chain of
// any length needs only a handful of tile registers.
void allocate_registers(Program& p, const Context&) {
  for (Step& s : p.steps)
    if (auto* f = std::get_if<FusedStep>(&s)) allocate(*f);
}

}  // namespace lazytrace::cpu::plan
