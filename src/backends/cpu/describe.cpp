// describe(): a program's steps and storages as text (lt::debug::to_program).
#include <sstream>
#include <string>

#include "backends/cpu/program.h"

namespace lazytrace::cpu {

std::string describe(const Program& p) {
  std::ostringstream os;
  os << "program " << (p.name.empty() ? "main" : p.name) << ": " << p.steps.size() << " steps, "
     << p.storages.size() << " storages, arena " << p.arena_bytes << " bytes\n";
  auto view = [](const View& v) {
    std::ostringstream o;
    if (v.is_scalar()) {
      o << "scalar("
        << (v.scalar_slot >= 0 ? "param#" + std::to_string(v.scalar_slot) : std::to_string(v.value))
        << ")";
    } else {
      o << "s" << v.storage << "+" << v.offset << "{";
      for (size_t i = 0; i < v.strides.size(); ++i) o << (i ? "," : "") << v.strides[i];
      o << "}";
    }
    return o.str();
  };
  auto adamw = [&](const AdamWStep& a) {
    os << "adamw " << view(a.param) << " ";
    if (a.grad_product)  // the gradient as the product the update computes
      os << "(" << view(a.grad_product->a) << " x " << view(a.grad_product->b) << ")";
    else
      os << view(a.grad);
    os << " " << view(a.exp_avg) << " " << view(a.exp_avg_sq) << " " << view(a.decay) << " "
       << view(a.step_size) << " " << view(a.inv_sqrt_bc2) << " -> s" << a.out[0] << " s"
       << a.out[1] << " s" << a.out[2];
  };
  if (p.invariant_steps > 0)
    os << "  steps [0, " << p.invariant_steps << ") are loop-invariant: a loop runs them once\n";
  for (size_t i = 0; i < p.steps.size(); ++i) {
    os << "  [" << i << "] ";
    const Step& s = p.steps[i];
    if (auto* f = std::get_if<FusedStep>(&s)) {
      os << "fused " << f->shape.str() << " " << f->program.size() << " instrs, " << f->num_regs
         << " regs; loads";
      for (const View& v : f->loads) os << " " << view(v);
      os << "; stores";
      for (const auto& st : f->stores) os << " r" << st.reg << "->" << view(st.dst);
    } else if (auto* r = std::get_if<ReduceStep>(&s)) {
      os << ir::op_name(r->op) << " " << view(r->in) << " -> s" << r->out_storage;
    } else if (auto* m = std::get_if<MatmulStep>(&s)) {
      os << "matmul " << view(m->a) << " x " << view(m->b) << " -> s" << m->out_storage << " "
         << m->out_shape.str();
      if (m->beside_next) os << "; beside the next";
    } else if (auto* gs = std::get_if<GatherStep>(&s)) {
      if (gs->source)
        os << "index_add " << view(gs->in) << "[" << view(gs->index) << "] += " << view(*gs->source)
           << " -> s" << gs->out_storage;
      else
        os << "gather " << view(gs->in) << "[" << view(gs->index) << "] -> s" << gs->out_storage;
    } else if (auto* a = std::get_if<AdamWStep>(&s)) {
      adamw(*a);
    } else if (auto* cs = std::get_if<CallStep>(&s)) {
      os << "call (" << cs->body->steps.size() << " steps, compiled once);";
      for (const View& v : cs->params) os << " " << view(v);
      os << " ->";
      for (int o : cs->outputs) os << " s" << o;
    } else if (auto* ls = std::get_if<LoopStep>(&s)) {
      os << (ls->kind == ir::Loop::Kind::While ? "while" : "scan") << " (";
      if (ls->kind == ir::Loop::Kind::Scan) os << ls->length << " iterations, ";
      os << ls->body->steps.size() << " steps";
      if (ls->body->invariant_steps > 0) os << ", " << ls->body->invariant_steps << " run once";
      os << ", compiled once);";
      for (const LoopStep::Input& in : ls->inputs)
        if (in.role != ir::Loop::Role::Unused) os << " " << view(in.view);
      os << " ->";
      for (int o : ls->outputs) os << " s" << o;
      if (ls->x_order.size() > 1) {
        os << "; xs in first-read order:";
        for (int k : ls->x_order) os << " " << k;
      }
      for (const AdamWStep& a : ls->updates) {
        os << "; beside it: ";
        adamw(a);
      }
    }
    os << "\n";
  }
  for (size_t i = 0; i < p.storages.size(); ++i) {
    const Storage& st = p.storages[i];
    static const char* kinds[] = {"param", "arena", "output"};
    os << "  s" << i << ": " << kinds[static_cast<int>(st.kind)] << " " << st.bytes << " bytes";
    if (st.kind == StorageKind::Arena) os << " @" << st.offset;
    if (st.slot >= 0) os << " slot " << st.slot;
    os << "\n";
  }
  return os.str();
}

}  // namespace lazytrace::cpu
