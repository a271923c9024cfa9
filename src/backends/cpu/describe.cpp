// describe(): a program's steps and storages as text (lt::debug::to_program).
#include <sstream>
#include <string>

#include "backends/cpu/jit_elementwise.h"
#include "backends/cpu/program.h"
#include "core/overload.h"

namespace lazytrace::cpu {

namespace {
// a body's program below its call or loop, each line indented
void describe_body(std::ostringstream& os, const char* what, const Program& body) {
  std::istringstream lines(describe(body));
  os << "\n      " << what << ":";
  for (std::string line; std::getline(lines, line);) os << "\n      " << line;
}
}  // namespace

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
      os << "(" << view(a.grad_product->a) << " x " << view(a.grad_product->b)
         << (a.grad_scale ? " * " + view(*a.grad_scale) : std::string()) << ")";
    else
      os << view(a.grad);
    os << " " << view(a.exp_avg) << " " << view(a.exp_avg_sq) << " " << view(a.decay) << " "
       << view(a.step_size) << " " << view(a.inv_sqrt_bc2) << " -> s" << a.out[0] << " s"
       << a.out[1] << " s" << a.out[2];
  };
  auto collective = [&](const CollectiveStep& c) {
    using Phase = CollectiveStep::Phase;
    if (c.phase == Phase::Wait) {
      os << "wait for " << ir::op_name(c.op) << " #" << c.ticket << " -> s" << c.out_storage;
      return;
    }
    os << ir::op_name(c.op);
    if (c.phase == Phase::Start) os << " #" << c.ticket << " started";
    os << " " << view(c.in) << " -> s" << c.out_storage << " over " << c.ranks << " ranks";
    if (c.op == ir::OpKind::AllReduce || c.op == ir::OpKind::ReduceScatter)
      os << " (" << runtime::reduce_op_name(c.reduce) << ", scale " << c.scale << ")";
    if (c.op == ir::OpKind::Broadcast) os << " from rank " << c.root;
  };
  if (p.invariant_steps > 0)
    os << "  steps [0, " << p.invariant_steps << ") are loop-invariant: a loop runs them once\n";
  for (size_t i = 0; i < p.steps.size(); ++i) {
    os << "  [" << i << "] ";
    std::visit(Overload{
                   [&](const FusedStep& f) {
                     os << "fused " << f.shape.str() << " " << f.program.size() << " instrs, "
                        << f.num_regs << " regs; loads";
                     for (const View& v : f.loads) os << " " << view(v);
                     os << "; stores";
                     for (const auto& st : f.stores) os << " r" << st.reg << "->" << view(st.dst);
                     if (f.read_ahead) os << "; reads ahead";
                     if (f.stream_stores) os << "; streams its stores";
                     if (f.stream_trial) os << "; streams its stores if faster";
                     if (f.jit) {
                       os << "; native code";
                       if (const int v = jit_vectors(*f.jit); v > 1)
                         os << ", " << v << " vectors at a time";
                       if (const int c = jit_constants(*f.jit); c > 0)
                         os << ", " << c << " constants in registers";
                       os << jit_ranges_note(*f.jit);
                     }
                   },
                   [&](const ReduceStep& r) {
                     os << ir::op_name(r.op) << " " << view(r.in) << " -> s" << r.out_storage;
                   },
                   [&](const MatmulStep& m) {
                     os << "matmul " << view(m.a) << " x " << view(m.b) << " -> s" << m.out_storage
                        << " " << m.out_shape.str();
                     if (m.beside_next) os << "; beside the next";
                   },
                   [&](const GatherStep& g) {
                     if (g.source)
                       os << "index_add " << view(g.in) << "[" << view(g.index)
                          << "] += " << view(*g.source) << " -> s" << g.out_storage;
                     else
                       os << "gather " << view(g.in) << "[" << view(g.index) << "] -> s"
                          << g.out_storage;
                   },
                   [&](const CheckStep& c) {
                     os << "check_targets " << view(c.targets) << " in [0, " << c.classes << ") or "
                        << c.ignore_index;
                   },
                   [&](const AdamWStep& a) { adamw(a); },
                   [&](const CollectiveStep& c) { collective(c); },
                   [&](const CallStep& c) {
                     os << "call (" << c.body->steps.size() << " steps, compiled once);";
                     for (const View& v : c.params) os << " " << view(v);
                     os << " ->";
                     for (int o : c.outputs) os << " s" << o;
                     describe_body(os, "body", *c.body);
                   },
                   [&](const LoopStep& l) {
                     os << (l.kind == ir::Loop::Kind::While ? "while" : "scan") << " (";
                     if (l.kind == ir::Loop::Kind::Scan) os << l.length << " iterations, ";
                     os << l.body->steps.size() << " steps";
                     if (l.body->invariant_steps > 0)
                       os << ", " << l.body->invariant_steps << " run once";
                     os << ", compiled once);";
                     for (const LoopStep::Input& in : l.inputs)
                       if (in.role != ir::Loop::Role::Unused) os << " " << view(in.view);
                     os << " ->";
                     for (int o : l.outputs) os << " s" << o;
                     if (l.x_order.size() > 1) {
                       os << "; xs in first-read order:";
                       for (int k : l.x_order) os << " " << k;
                     }
                     for (const AdamWStep& a : l.updates) {
                       os << "; beside it: ";
                       adamw(a);
                     }
                     for (const LoopStep::Collective& c : l.collectives) {
                       os << "; started in it: ";
                       collective(c.step);
                       os << "," << describe_parts(c);
                     }
                     if (l.cond) describe_body(os, "condition", *l.cond);
                     describe_body(os, "body", *l.body);
                   },
               },
               p.steps[i]);
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

std::string describe_parts(const LoopStep::Collective& c) {
  std::string out = " parts:";
  for (const LoopStep::Collective::Part& part : c.parts) {
    out += part.per_slice   ? " by slice"
           : part.after < 0 ? " before it"
                            : " after slice " + std::to_string(part.after);
    out += part.narrowed ? " cast," : ",";
  }
  out.pop_back();
  return out;
}

}  // namespace lazytrace::cpu
