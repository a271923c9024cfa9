// Lowering: layout ops become views, elementwise chains become fused steps (one pass
// over tiles), and every intermediate storage gets an arena offset.
#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

#include "compiler/compile_cache.h"
#include "compiler/program.h"
#include "compiler/views.h"
#include "core/check.h"
#include "core/lru_cache.h"
#include "ir/body.h"
#include "ir/shape_rules.h"
#include "lazytrace/core/error.h"
#include "metrics/known.h"

namespace lazytrace::compiler {
namespace {

using ir::GNode;
using ir::OpKind;

struct Value {
  enum Kind { None, AsView, Reg } kind = None;
  View view;       // AsView; also set for a Reg once it has been stored
  int group = -1;  // Reg
  int reg = -1;
  bool stored = false;
};

struct Group {
  FusedStep step;
  int step_index = -1;        // >= 0 once sealed: its position in the program; -2: merged away
  std::map<int, int> loaded;  // node -> register it was loaded into (one load per value)
  std::vector<int> members;   // nodes whose value is a register of this group
};

class Lowering {
 public:
  Lowering(const ir::Graph& g, int first_input)
      : g_(g), first_input_(first_input), vals_(g.nodes.size()) {
    find_unstacked();
    find_adamw_products();
  }

  Program run() {
    p_.name = g_.name;
    p_.num_params = static_cast<int>(g_.param_nodes.size());
    p_.num_scalars = static_cast<int>(g_.scalar_nodes.size());
    for (size_t i = 0; i < g_.nodes.size(); ++i) lower_node(static_cast<int>(i));
    bind_results();
    for (size_t gi = 0; gi < groups_.size(); ++gi)
      if (groups_[gi].step_index != -2) seal(static_cast<int>(gi));
    for (Step& s : p_.steps)
      if (auto* f = std::get_if<FusedStep>(&s)) allocate_registers(*f);
    attach_updates();
    hoist_invariants();
    plan_arena();
    find_donations();
    pair_products();
    order_loop_reads();
    return std::move(p_);
  }

 private:
  int new_storage(const Shape& shape, DType dt, StorageKind kind = StorageKind::Arena) {
    Storage s;
    s.kind = kind;
    s.bytes = shape.numel() * static_cast<int64_t>(itemsize(dt));
    if (kind == StorageKind::Output) s.slot = p_.num_outputs++;
    p_.storages.push_back(s);
    writers_.emplace_back();
    return static_cast<int>(p_.storages.size()) - 1;
  }

  FusedStep& step_of(int gid) {
    Group& gr = groups_[gid];
    return gr.step_index >= 0 ? std::get<FusedStep>(p_.steps[gr.step_index]) : gr.step;
  }

  void seal(int gid) {
    Group& gr = groups_[gid];
    if (gr.step_index >= 0) return;
    gr.step_index = static_cast<int>(p_.steps.size());
    p_.steps.emplace_back(std::move(gr.step));
  }

  // Before a storage is read, every open group that writes into it must be placed.
  void seal_writers(int storage) {
    if (storage < 0) return;
    for (int gid : writers_[storage]) seal(gid);
    writers_[storage].clear();
  }

  void add_store(int gid, int reg, const View& dst) {
    step_of(gid).stores.push_back({reg, dst});
    writers_[dst.storage].push_back(gid);
  }

  // The node's value as a view that kernels can read; stores and seals its group if
  // it is still a register.
  View use_view(int n) {
    Value& v = vals_[n];
    if (v.kind == Value::Reg && !v.stored) {
      const GNode& node = g_.nodes[n];
      int s = new_storage(node.shape, node.dtype);
      v.view = contiguous_view(s, node.dtype, node.shape);
      add_store(v.group, v.reg, v.view);
      v.stored = true;
    }
    seal_writers(v.view.storage);
    return v.view;
  }

  // A view backed by memory (a scalar view is written out first).
  View use_memory_view(int n) {
    View v = use_view(n);
    if (!v.is_scalar()) return v;
    int s = copy_to_new(v, StorageKind::Arena);
    return contiguous_view(s, v.dtype, v.shape);
  }

  int new_group(const Shape& shape) {
    groups_.emplace_back();
    groups_.back().step.shape = shape;
    return static_cast<int>(groups_.size()) - 1;
  }

  int emit(int gid, Instr ins) {
    FusedStep& st = step_of(gid);
    ins.dst = st.num_regs++;
    st.program.push_back(ins);
    return ins.dst;
  }

  int load_reg(int gid, const View& v) {
    FusedStep& st = step_of(gid);
    st.loads.push_back(broadcast_view(v, st.shape));
    Instr ins{};
    ins.op = OpKind::Data;
    ins.dtype = v.dtype;
    ins.in_dtype = v.dtype;
    ins.load = static_cast<int>(st.loads.size()) - 1;
    return emit(gid, ins);
  }

  int reg_of(int gid, int n) {
    Value& v = vals_[n];
    if (v.kind == Value::Reg && v.group == gid) return v.reg;
    auto [it, fresh] = groups_[gid].loaded.try_emplace(n, -1);
    if (fresh) it->second = load_reg(gid, use_view(n));
    return it->second;
  }

  // Writes a view into a new contiguous storage with a one-load fused step.
  int copy_to_new(const View& src, StorageKind kind) {
    int s = new_storage(src.shape, src.dtype, kind);
    int gid = new_group(src.shape);
    int r = load_reg(gid, src);
    add_store(gid, r, contiguous_view(s, src.dtype, src.shape));
    seal(gid);
    return s;
  }

  // A stack (a concat along dim 0 of tensors with leading dim 1) that only loops read as
  // xs is never made: each iteration reads its part where it lies (scan_layers' weights).
  void find_unstacked() {
    std::vector<int>& uses = uses_;
    uses.assign(g_.nodes.size(), 0);
    sole_user_.assign(g_.nodes.size(), -1);
    std::vector<int> loop_uses(g_.nodes.size(), 0);
    for (size_t u = 0; u < g_.nodes.size(); ++u) {
      const GNode& n = g_.nodes[u];
      for (int in : n.inputs) {
        ++uses[static_cast<size_t>(in)];
        sole_user_[static_cast<size_t>(in)] = static_cast<int>(u);
      }
      if (n.op != OpKind::Loop) continue;
      const auto& loop = *static_cast<const ir::Loop*>(n.body.get());
      for (size_t k = 0; k < loop.roles.size(); ++k)
        if (loop.roles[k] == ir::Loop::Role::X) ++loop_uses[static_cast<size_t>(n.inputs[k])];
    }
    unstacked_.assign(g_.nodes.size(), 0);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const GNode& n = g_.nodes[i];
      if (n.op != OpKind::Concat || n.attrs[0] != 0 || uses[i] == 0 || uses[i] != loop_uses[i])
        continue;
      bool parts = true;
      for (int in : n.inputs) parts = parts && g_.nodes[static_cast<size_t>(in)].shape[0] == 1;
      unstacked_[i] = parts;
    }
  }

  void lower_node(int i) {
    const GNode& n = g_.nodes[i];
    if (unstacked_[static_cast<size_t>(i)]) return;  // read part by part by the loops
    if (in_adamw_[static_cast<size_t>(i)]) return;   // an AdamW update computes it
    Value& out = vals_[i];
    switch (ir::op_info(n.op).family) {
      case ir::OpFamily::Leaf:
        out.kind = Value::AsView;
        if (n.op == OpKind::Data) {
          out.view = contiguous_view(param_storage(n.param, n), n.dtype, n.shape);
        } else {
          out.view.dtype = n.dtype;
          out.view.shape = n.shape;
          out.view.scalar_slot = n.scalar_is_param ? n.param : -1;
          out.view.value = n.value;
          out.view.ivalue = n.ivalue;
        }
        return;
      case ir::OpFamily::Generator:
      case ir::OpFamily::Elementwise:
        return lower_elementwise(i);
      case ir::OpFamily::Layout:
        return lower_layout(i);
      case ir::OpFamily::Reduce: {
        ReduceStep r;
        r.op = n.op;
        r.in = use_memory_view(n.inputs[0]);
        r.dims.assign(n.attrs.begin(), n.attrs.end());
        r.out_dtype = n.dtype;
        r.out_storage = new_storage(n.shape, n.dtype);
        p_.steps.emplace_back(std::move(r));
        set_storage_value(i, std::get<ReduceStep>(p_.steps.back()).out_storage);
        return;
      }
      case ir::OpFamily::Other:
        break;
    }
    if (n.op == OpKind::Matmul) return lower_matmul(i);
    if (n.op == OpKind::Call) return lower_call(i);
    if (n.op == OpKind::Loop) return lower_loop(i);
    if (n.op == OpKind::CallResult) {
      vals_[i].kind = Value::AsView;
      vals_[i].view = call_results_.at(n.inputs[0])[static_cast<size_t>(n.attrs[0])];
      return;
    }
    if (n.op == OpKind::Concat) return lower_concat(i);
    if (n.op == OpKind::AdamW) return lower_adamw(i);
    if (n.op == OpKind::IndexSelect || n.op == OpKind::IndexAdd) {
      GatherStep gs;
      gs.in = use_memory_view(n.inputs[0]);
      gs.index = use_memory_view(n.inputs[1]);
      if (n.op == OpKind::IndexAdd) gs.source = use_memory_view(n.inputs[2]);
      gs.dim = static_cast<int>(n.attrs[0]);
      gs.out_shape = n.shape;
      gs.out_storage = new_storage(n.shape, n.dtype);
      p_.steps.emplace_back(std::move(gs));
      set_storage_value(i, std::get<GatherStep>(p_.steps.back()).out_storage);
      return;
    }
    fail("compile", "no lowering for op ", ir::op_name(n.op));
  }

  int param_storage(int slot, const GNode& n) {
    auto it = param_storages_.find(slot);
    if (it != param_storages_.end()) return it->second;
    int s = new_storage(n.shape, n.dtype, StorageKind::Param);
    p_.storages[s].slot = slot;
    param_storages_[slot] = s;
    return s;
  }

  void set_storage_value(int i, int storage) {
    vals_[i].kind = Value::AsView;
    vals_[i].view = contiguous_view(storage, g_.nodes[i].dtype, g_.nodes[i].shape);
  }

  void lower_elementwise(int i) {
    const GNode& n = g_.nodes[i];
    auto joinable = [&](int in) {
      const Value& v = vals_[in];
      return v.kind == Value::Reg && groups_[v.group].step_index < 0 &&
             g_.nodes[in].shape == n.shape;
    };
    // Inputs that will be loaded are resolved first: reading them may place (seal) a group,
    // e.g. one that writes a concat this node reads, and a placed group takes no new members.
    for (int in : n.inputs)
      if (!joinable(in)) use_view(in);
    int gid = -1;
    for (int in : n.inputs)
      if (joinable(in)) {
        gid = vals_[in].group;
        break;
      }
    if (gid < 0) gid = new_group(n.shape);
    // Other open groups of the same shape feeding this node join it too: nothing outside
    // reads them yet, so their instructions can run in the same pass.
    for (int in : n.inputs)
      if (joinable(in) && vals_[in].group != gid) merge(gid, vals_[in].group);
    Instr ins{};
    ins.op = n.op;
    ins.dtype = n.dtype;
    ins.in_dtype = n.inputs.empty() ? n.dtype : g_.nodes[n.inputs.back()].dtype;
    for (size_t k = 0; k < n.inputs.size(); ++k) ins.src[k] = reg_of(gid, n.inputs[k]);
    if (n.op == OpKind::Iota) {
      ins.f[0] = n.attrs.get_double(0);
      ins.f[1] = n.attrs.get_double(1);
    }
    Value& out = vals_[i];
    out.kind = Value::Reg;
    out.group = gid;
    out.reg = emit(gid, ins);
    groups_[gid].members.push_back(i);
  }

  // Appends open group `from` to open group `into` (registers and loads renumbered).
  void merge(int into, int from) {
    Group& a = groups_[into];
    Group& b = groups_[from];
    const int reg_base = a.step.num_regs, load_base = static_cast<int>(a.step.loads.size());
    for (View& v : b.step.loads) a.step.loads.push_back(std::move(v));
    for (Instr ins : b.step.program) {
      ins.dst += reg_base;
      for (int& r : ins.src)
        if (r >= 0) r += reg_base;
      if (ins.load >= 0) ins.load += load_base;
      a.step.program.push_back(ins);
    }
    a.step.num_regs += b.step.num_regs;
    for (auto& st : b.step.stores) {
      a.step.stores.push_back({st.reg + reg_base, st.dst});
      for (int& w : writers_[st.dst.storage])
        if (w == from) w = into;
    }
    for (auto& [node, reg] : b.loaded) a.loaded.try_emplace(node, reg + reg_base);
    for (int m : b.members) {
      vals_[m].group = into;
      vals_[m].reg += reg_base;
      a.members.push_back(m);
    }
    b = Group{};
    b.step_index = -2;
  }

  void lower_layout(int i) {
    const GNode& n = g_.nodes[i];
    int in = n.inputs[0];
    View v = use_view(in);
    Value& out = vals_[i];
    out.kind = Value::AsView;
    switch (n.op) {
      case OpKind::Reshape: {
        auto r = reshape_view(v, n.shape);
        if (!r) {
          int s = copy_to_new(v, StorageKind::Arena);
          r = contiguous_view(s, v.dtype, n.shape);
        }
        out.view = *r;
        return;
      }
      case OpKind::Permute:
        out.view = permute_view(v, n.attrs.begin());
        return;
      case OpKind::BroadcastTo:
        out.view = broadcast_view(v, n.shape);
        return;
      case OpKind::Slice:
        out.view = slice_view(v, static_cast<int>(n.attrs[0]), n.attrs[1], n.attrs[2],
                              n.shape[static_cast<int>(n.attrs[0])]);
        return;
#define LT_OP(kind, name, family, arity) case OpKind::kind:
#define LT_LAYOUT_OP(kind, name)
#include "ir/ops.def"
        break;
    }
    LT_UNREACHABLE("lower_layout lowers a layout op");
  }

  // BLAS reads a matrix with unit stride along one of its two dims.
  static bool blas_layout(View& v) {
    int r = v.shape.size() - 2, c = v.shape.size() - 1;
    if (v.shape[c] == 1) v.strides[c] = 1;
    if (v.shape[r] == 1) v.strides[r] = v.strides[c] == 1 ? std::max<int64_t>(v.shape[c], 1) : 1;
    if (v.strides[c] == 1 && v.strides[r] >= std::max<int64_t>(v.shape[c], 1)) return true;
    if (v.strides[r] == 1 && v.strides[c] >= std::max<int64_t>(v.shape[r], 1)) return true;
    return false;
  }

  View matmul_operand(int n, bool is_rhs) {
    View v = use_memory_view(n);
    if (v.shape.size() == 1) {  // [k] -> [1, k] (lhs) or [k, 1] (rhs)
      int64_t k = v.shape[0], s = v.strides[0];
      v.shape = is_rhs ? Shape{k, 1} : Shape{1, k};
      v.strides = is_rhs ? std::vector<int64_t>{s, 0} : std::vector<int64_t>{0, s};
    }
    View m = v;
    if (!blas_layout(m)) {
      int s = copy_to_new(v, StorageKind::Arena);
      m = contiguous_view(s, v.dtype, v.shape);
      blas_layout(m);
    }
    return m;
  }

  // x [batch..., m, k] @ w [k, n] (a Linear layer) is one GEMM of [batch*m, k] rows when
  // x's rows step evenly through its batch dims: one large product instead of many small.
  static void fold_batch_into_rows(MatmulStep& ms) {
    View& a = ms.a;
    const int r = a.shape.size() - 2;
    if (a.strides[r + 1] != 1) return;
    int64_t rows = a.shape[r], expect = a.shape[r] * a.strides[r];
    for (int d = r - 1; d >= 0; --d) {
      if (a.shape[d] != 1 && a.strides[d] != expect) return;
      rows *= a.shape[d];
      expect *= a.shape[d];
    }
    a.shape = Shape{rows, a.shape[r + 1]};
    a.strides = {a.strides[r], 1};
    View& b = ms.b;
    const int rb = b.shape.size() - 2;
    b.shape = Shape{b.shape[rb], b.shape[rb + 1]};
    b.strides = {b.strides[rb], b.strides[rb + 1]};
  }

  // A 2-d product read only through its transpose (a weight's gradient, x^T dy, which the
  // transpose's VJP turns back into the weight's layout) is computed transposed, as
  // dy^T x: the result lands in the layout its reader wants, with no strided copy after.
  bool read_transposed(int i) const {
    const int u = sole_user_[static_cast<size_t>(i)];
    if (uses_[static_cast<size_t>(i)] != 1 || u < 0 ||
        g_.results.end() != std::find(g_.results.begin(), g_.results.end(), i))
      return false;
    const GNode& p = g_.nodes[static_cast<size_t>(u)];
    return ir::is_matrix_transpose(p.op, p.attrs);
  }

  void lower_matmul(int i) {
    const GNode& n = g_.nodes[i];
    MatmulStep ms;
    ms.a = matmul_operand(n.inputs[0], false);
    ms.b = matmul_operand(n.inputs[1], true);
    if (n.shape.size() == 2 && ms.a.shape.size() == 2 && ms.b.shape.size() == 2 &&
        read_transposed(i)) {
      static const int64_t swap[2] = {1, 0};
      MatmulStep t;
      t.a = permute_view(ms.b, swap);
      t.b = permute_view(ms.a, swap);
      t.out_shape = Shape{n.shape[1], n.shape[0]};
      t.dtype = n.dtype;
      t.out_storage = new_storage(t.out_shape, n.dtype);
      const int storage = t.out_storage;
      if (t.out_shape.numel() > 0) p_.steps.emplace_back(std::move(t));
      vals_[i].kind = Value::AsView;
      vals_[i].view =
          permute_view(contiguous_view(storage, n.dtype, Shape{n.shape[1], n.shape[0]}), swap);
      return;
    }
    Shape ba(ms.a.shape.begin(), ms.a.shape.end() - 2),
        bb(ms.b.shape.begin(), ms.b.shape.end() - 2);
    if (bb.numel() == 1 && ba.size() > 0) fold_batch_into_rows(ms);
    ba = Shape(ms.a.shape.begin(), ms.a.shape.end() - 2);
    bb = Shape(ms.b.shape.begin(), ms.b.shape.end() - 2);
    Shape out = ir::broadcast_shapes("matmul", ba, bb);
    out.push_back(ms.a.shape[ms.a.shape.size() - 2]);
    out.push_back(ms.b.shape.back());
    ms.out_shape = out;
    ms.dtype = n.dtype;
    ms.out_storage = new_storage(n.shape, n.dtype);
    const int storage = ms.out_storage;
    if (out.numel() > 0) p_.steps.emplace_back(std::move(ms));  // an empty product has no work
    set_storage_value(i, storage);
  }

  void lower_concat(int i) {
    const GNode& n = g_.nodes[i];
    int dim = static_cast<int>(n.attrs[0]);
    int s = new_storage(n.shape, n.dtype);
    View whole = contiguous_view(s, n.dtype, n.shape);
    int64_t pos = 0;
    for (int in : n.inputs) {
      const GNode& src = g_.nodes[in];
      View part = slice_view(whole, dim, pos, 1, src.shape[dim]);
      pos += src.shape[dim];
      if (src.shape.numel() == 0) continue;
      Value& v = vals_[in];
      if (v.kind == Value::Reg && groups_[v.group].step_index < 0) {
        add_store(v.group, v.reg, part);  // the producer writes straight into its slot
        continue;
      }
      int gid = new_group(src.shape);
      add_store(gid, load_reg(gid, use_view(in)), part);
      seal(gid);
    }
    set_storage_value(i, s);
  }

  void bind_results() {
    for (int r : g_.results) {
      const GNode& n = g_.nodes[r];
      Value& v = vals_[r];
      ResultBinding b{-1, n.shape, n.dtype};
      if (v.kind == Value::Reg && !v.stored) {
        int s = new_storage(n.shape, n.dtype, StorageKind::Output);
        v.view = contiguous_view(s, n.dtype, n.shape);
        v.stored = true;
        add_store(v.group, v.reg, v.view);
        b.storage = s;
      } else {
        const View& view = v.view;
        bool whole = !view.is_scalar() && view.is_contiguous() && view.offset == 0 &&
                     p_.storages[view.storage].bytes ==
                         n.shape.numel() * static_cast<int64_t>(itemsize(n.dtype));
        if (whole) {
          Storage& st = p_.storages[view.storage];
          if (st.kind == StorageKind::Arena) {
            st.kind = StorageKind::Output;
            st.slot = p_.num_outputs++;
          }
          b.storage = view.storage;
        } else {
          b.storage = copy_to_new(view, StorageKind::Output);
        }
      }
      p_.results.push_back(b);
    }
  }

  // Maps each fused step's virtual registers to a few physical ones by liveness, so a
  // chain of any length needs only a handful of tile registers.
  static void allocate_registers(FusedStep& st) {
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
        DType operand = (ins.op == OpKind::Where && k == 0) ? DType::bool_ : ins.in_dtype;
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

  void plan_arena();
  void attach_updates();
  void hoist_invariants();
  void order_loop_reads();
  void find_donations();
  void pair_products();

  // A call: the body's program (compiled once per body) runs on the caller's memory. The
  // call's inputs are the body's inputs, then its Data leaves, then its scalar leaves.
  void lower_call(int i) {
    const GNode& n = g_.nodes[i];
    const auto& body = *static_cast<const ir::Body*>(n.body.get());
    std::shared_ptr<const Program> prog = body_program(body);
    const int nin = body.num_inputs;
    const int nd = static_cast<int>(body.graph.param_nodes.size());
    CallStep cs;
    cs.body = prog;
    for (int s = 0; s < nd + nin; ++s) {
      cs.params.push_back(use_contiguous(n.inputs[static_cast<size_t>(s < nd ? nin + s : s - nd)]));
    }
    for (size_t j = 0; j < body.graph.scalar_nodes.size(); ++j)
      cs.scalars.push_back(g_.nodes[n.inputs[static_cast<size_t>(nin + nd) + j]].param);
    cs.outputs.assign(static_cast<size_t>(prog->num_outputs), -1);
    std::vector<View> results;
    for (const ResultBinding& b : prog->results) {
      const Storage& st = prog->storages[static_cast<size_t>(b.storage)];
      if (st.kind == StorageKind::Param) {  // the body returns an input as it is
        results.push_back(cs.params[static_cast<size_t>(st.slot)]);
        continue;
      }
      int& out = cs.outputs[static_cast<size_t>(st.slot)];
      if (out < 0) out = new_storage(b.shape, b.dtype);
      results.push_back(contiguous_view(out, b.dtype, b.shape));
    }
    if (prog->arena_bytes > 0) cs.scratch = new_storage(Shape{prog->arena_bytes}, DType::bool_);
    p_.steps.emplace_back(std::move(cs));
    call_results_[i] = std::move(results);
  }

  // The product an AdamW update computes for its gradient node `grad` (AdamWStep::
  // grad_product), or -1: a float32 matmul read only by that update, or only through a
  // transpose that only the update reads (a weight's gradient xᵀ dy, read as the weight),
  // with a reduction of at most 32 and no broadcast batch dims. Neither node is lowered:
  // a weight's gradient over few tokens never goes through memory.
  int adamw_product(int grad) const {
    auto read_only_by = [&](int i, int reader) {
      return uses_[static_cast<size_t>(i)] == 1 && sole_user_[static_cast<size_t>(i)] == reader &&
             g_.results.end() == std::find(g_.results.begin(), g_.results.end(), i);
    };
    const GNode& gn = g_.nodes[static_cast<size_t>(grad)];
    const int u = sole_user_[static_cast<size_t>(grad)];
    if (u < 0 || !read_only_by(grad, u)) return -1;
    const GNode& user = g_.nodes[static_cast<size_t>(u)];
    if (user.op != OpKind::AdamW || user.inputs[1] != grad || user.shape != gn.shape) return -1;
    int m = grad;
    if (ir::is_matrix_transpose(gn.op, gn.attrs)) {
      m = gn.inputs[0];
      if (!read_only_by(m, grad)) return -1;
    }
    const GNode& n = g_.nodes[static_cast<size_t>(m)];
    if (n.op != OpKind::Matmul || n.dtype != DType::float32 || n.shape.size() < 2) return -1;
    const int nd = n.shape.size();
    for (int in : {n.inputs[0], n.inputs[1]}) {
      const GNode& x = g_.nodes[static_cast<size_t>(in)];
      if (x.dtype != DType::float32 || x.shape.size() != nd) return -1;
      for (int d = 0; d < nd - 2; ++d)
        if (x.shape[d] != n.shape[d]) return -1;
    }
    return g_.nodes[static_cast<size_t>(n.inputs[1])].shape[nd - 2] <= 32 ? m : -1;
  }

  void find_adamw_products() {
    in_adamw_.assign(g_.nodes.size(), 0);
    for (const GNode& n : g_.nodes) {
      if (n.op != OpKind::AdamW) continue;
      const int m = adamw_product(n.inputs[1]);
      if (m < 0) continue;
      in_adamw_[static_cast<size_t>(m)] = 1;
      in_adamw_[static_cast<size_t>(n.inputs[1])] = 1;
    }
  }

  void lower_adamw(int i) {
    const GNode& n = g_.nodes[i];
    AdamWStep s;
    if (const int p = adamw_product(n.inputs[1]); p >= 0) {
      const GNode& m = g_.nodes[static_cast<size_t>(p)];
      MatmulStep ms;
      ms.a = matmul_operand(m.inputs[0], false);
      ms.b = matmul_operand(m.inputs[1], true);
      ms.out_storage = -1;
      ms.out_shape = m.shape;
      ms.dtype = m.dtype;
      if (p != n.inputs[1]) {  // the gradient is the product's transpose: (a b)ᵀ = bᵀ aᵀ
        static const int64_t swap[2] = {1, 0};
        std::swap(ms.a, ms.b);
        ms.a = permute_view(ms.a, swap);
        ms.b = permute_view(ms.b, swap);
        ms.out_shape = Shape{m.shape[1], m.shape[0]};
      }
      s.grad_product = std::move(ms);
    }
    View* tensors[] = {&s.param, &s.grad, &s.exp_avg, &s.exp_avg_sq};
    View* numbers[] = {&s.decay, &s.step_size, &s.inv_sqrt_bc2};
    for (int k = 0; k < 4; ++k)
      if (k != 1 || !s.grad_product) *tensors[k] = use_contiguous(n.inputs[k]);
    for (int k = 0; k < 3; ++k) *numbers[k] = use_view(n.inputs[4 + k]);
    s.beta1 = n.attrs.get_double(0);
    s.beta2 = n.attrs.get_double(1);
    s.eps = n.attrs.get_double(2);
    std::vector<View> results;
    for (int& o : s.out) {
      o = new_storage(n.shape, n.dtype);
      results.push_back(contiguous_view(o, n.dtype, n.shape));
    }
    p_.steps.emplace_back(std::move(s));
    call_results_[i] = std::move(results);
  }

  // A contiguous memory view of node `in` (copied if it is strided or a scalar).
  View use_contiguous(int in) {
    View v = use_memory_view(in);
    if (!v.is_contiguous()) {
      const int c = copy_to_new(v, StorageKind::Arena);
      v = contiguous_view(c, v.dtype, v.shape);
    }
    return v;
  }

  // A loop: its inputs by role, then its bodies' Data leaves (body's, then cond's), then
  // their scalar leaves.
  void lower_loop(int i) {
    const GNode& n = g_.nodes[i];
    const auto& loop = *static_cast<const ir::Loop*>(n.body.get());
    LoopStep ls;
    ls.kind = loop.kind;
    ls.length = loop.length;
    ls.reverse = loop.reverse;
    ls.body = body_program(*loop.body);
    if (loop.cond) ls.cond = body_program(*loop.cond);
    const int nin = loop.body->num_inputs;
    for (int k = 0; k < nin; ++k) {
      LoopStep::Input in;
      in.role = loop.roles[static_cast<size_t>(k)];
      const int node = n.inputs[static_cast<size_t>(k)];
      if (in.role == ir::Loop::Role::Counter) {
        in.view = use_view(node);
        in.step = loop.steps[static_cast<size_t>(k)];
      } else if (in.role == ir::Loop::Role::X && unstacked_[static_cast<size_t>(node)]) {
        for (int part : g_.nodes[static_cast<size_t>(node)].inputs)
          in.slices.push_back(use_contiguous(part));
        in.view.dtype = g_.nodes[static_cast<size_t>(node)].dtype;
        in.view.shape = g_.nodes[static_cast<size_t>(node)].shape;
      } else if (in.role != ir::Loop::Role::Unused) {
        in.view = use_contiguous(node);
      }
      if (in.role == ir::Loop::Role::X && loop.length > 0)
        in.slice_bytes =
            in.view.shape.numel() / loop.length * static_cast<int64_t>(itemsize(in.view.dtype));
      ls.inputs.push_back(std::move(in));
    }
    size_t at = static_cast<size_t>(nin);
    for (size_t k = 0; k < loop.body->graph.param_nodes.size(); ++k)
      ls.body_leaves.push_back(use_contiguous(n.inputs[at++]));
    if (loop.cond)
      for (size_t k = 0; k < loop.cond->graph.param_nodes.size(); ++k)
        ls.cond_leaves.push_back(use_contiguous(n.inputs[at++]));
    for (size_t k = 0; k < loop.body->graph.scalar_nodes.size(); ++k)
      ls.body_scalars.push_back(g_.nodes[n.inputs[at++]].param);
    if (loop.cond)
      for (size_t k = 0; k < loop.cond->graph.scalar_nodes.size(); ++k)
        ls.cond_scalars.push_back(g_.nodes[n.inputs[at++]].param);
    std::vector<View> results;
    for (const auto& [shape, dtype] : loop.result_types) {
      ls.outputs.push_back(new_storage(shape, dtype));
      results.push_back(contiguous_view(ls.outputs.back(), dtype, shape));
    }
    for (int k = 0; k < loop.num_carry; ++k) {
      const auto& [shape, dtype] = loop.result_types[static_cast<size_t>(k)];
      ls.spare.push_back(new_storage(shape, dtype));
    }
    if (ls.body->arena_bytes > 0)
      ls.scratch = new_storage(Shape{ls.body->arena_bytes}, DType::bool_);
    if (ls.cond && ls.cond->arena_bytes > 0)
      ls.cond_scratch = new_storage(Shape{ls.cond->arena_bytes}, DType::bool_);
    p_.steps.emplace_back(std::move(ls));
    call_results_[i] = std::move(results);
  }

  const ir::Graph& g_;
  int first_input_;  // a body's first input parameter slot (-1: not a body)
  Program p_;
  std::vector<Value> vals_;
  std::vector<Group> groups_;
  std::vector<std::vector<int>> writers_;
  std::map<int, int> param_storages_;
  std::map<int, std::vector<View>> call_results_;
  std::vector<char> unstacked_;  // concat nodes that loops read part by part
  std::vector<char> in_adamw_;   // products (and their transposes) AdamW updates compute
  std::vector<int> uses_;        // how many operands refer to each node
  std::vector<int> sole_user_;   // the last node using each node (the only one if uses_ is 1)
};

template <typename F>
void adamw_views(const AdamWStep& a, F&& f) {
  for (const View* v :
       {&a.param, &a.grad, &a.exp_avg, &a.exp_avg_sq, &a.decay, &a.step_size, &a.inv_sqrt_bc2})
    if (!v->is_scalar()) f(v->storage);
  if (a.grad_product) {
    f(a.grad_product->a.storage);
    f(a.grad_product->b.storage);
  }
  for (int o : a.out) f(o);
}

template <typename F>
void for_each_view(const Step& step, F&& f) {
  if (auto* c = std::get_if<CallStep>(&step)) {
    for (const View& v : c->params) f(v.storage);
    for (int o : c->outputs) f(o);
    f(c->scratch);
    return;
  }
  if (auto* l = std::get_if<LoopStep>(&step)) {
    for (const LoopStep::Input& in : l->inputs) {
      f(in.view.storage);
      for (const View& v : in.slices) f(v.storage);
    }
    for (const View& v : l->body_leaves) f(v.storage);
    for (const View& v : l->cond_leaves) f(v.storage);
    for (int o : l->outputs) f(o);
    for (int o : l->spare) f(o);
    f(l->scratch);
    f(l->cond_scratch);
    for (const AdamWStep& a : l->updates) adamw_views(a, f);
    return;
  }
  if (auto* s = std::get_if<FusedStep>(&step)) {
    for (const View& v : s->loads) f(v.storage);
    for (const auto& st : s->stores) f(st.dst.storage);
  } else if (auto* r = std::get_if<ReduceStep>(&step)) {
    f(r->in.storage);
    f(r->out_storage);
  } else if (auto* m = std::get_if<MatmulStep>(&step)) {
    f(m->a.storage);
    f(m->b.storage);
    f(m->out_storage);
  } else if (auto* gs = std::get_if<GatherStep>(&step)) {
    f(gs->in.storage);
    f(gs->index.storage);
    if (gs->source) f(gs->source->storage);
    f(gs->out_storage);
  } else if (auto* a = std::get_if<AdamWStep>(&step)) {
    adamw_views(*a, f);
  }
}

// The storages a step writes (every other storage it names, it only reads).
template <typename F>
void for_each_write(const Step& step, F&& f) {
  if (auto* s = std::get_if<FusedStep>(&step)) {
    for (const auto& st : s->stores) f(st.dst.storage);
  } else if (auto* r = std::get_if<ReduceStep>(&step)) {
    f(r->out_storage);
  } else if (auto* m = std::get_if<MatmulStep>(&step)) {
    f(m->out_storage);
  } else if (auto* gs = std::get_if<GatherStep>(&step)) {
    f(gs->out_storage);
  } else if (auto* c = std::get_if<CallStep>(&step)) {
    for (int o : c->outputs) f(o);
    f(c->scratch);
  } else if (auto* l = std::get_if<LoopStep>(&step)) {
    for (int o : l->outputs) f(o);
    for (int o : l->spare) f(o);
    f(l->scratch);
    f(l->cond_scratch);
    for (const AdamWStep& a : l->updates)
      for (int o : a.out) f(o);
  } else if (auto* a = std::get_if<AdamWStep>(&step)) {
    for (int o : a->out) f(o);
  }
}

// The first and last step touching each storage (nsteps and -1: none). What a loop-invariant
// step touches in the arena is used by every step: the loop runs those steps only before its
// first iteration.
std::pair<std::vector<int>, std::vector<int>> storage_uses(const Program& p) {
  const int nsteps = static_cast<int>(p.steps.size());
  std::vector<int> first(p.storages.size(), nsteps), last(p.storages.size(), -1);
  for (int i = 0; i < nsteps; ++i)
    for_each_view(p.steps[i], [&](int s) {
      if (s < 0) return;
      first[s] = std::min(first[s], i);
      last[s] = std::max(last[s], i);
      if (i < p.invariant_steps && p.storages[s].kind == StorageKind::Arena) last[s] = nsteps - 1;
    });
  return {std::move(first), std::move(last)};
}

// AdamW updates that can run beside a scan (LoopStep::updates): an update whose gradient
// is a product of two of the scan's ys, batch i of it made of slice i of each, and whose
// other operands (parameter, moments, the step's scalars) do not depend on the scan. The
// steps that make those scalars move before the scan; the update moves into it. Runs before
// the arena is planned, while every storage is still written by one step.
void Lowering::attach_updates() {
  const size_t ns = p_.storages.size();
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
  for (size_t li = 0; li < p_.steps.size(); ++li) {
    auto* loop = std::get_if<LoopStep>(&p_.steps[li]);
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
    std::vector<char> attach(p_.steps.size(), 0), hoist(p_.steps.size(), 0);
    std::vector<char> needed(ns, 0);  // read by an attached update, made after the loop
    for (size_t k = li + 1; k < p_.steps.size(); ++k) {
      const Step& st = p_.steps[k];
      const auto* a = std::get_if<AdamWStep>(&st);
      bool dep = false;
      if (a && a->grad_product && a->grad_product->out_shape.size() == 3 &&
          a->grad_product->out_shape[0] == loop->length && slice_of_ys(a->grad_product->a) &&
          slice_of_ys(a->grad_product->b)) {
        bool free = true;
        for (const View* v :
             {&a->param, &a->exp_avg, &a->exp_avg_sq, &a->decay, &a->step_size, &a->inv_sqrt_bc2})
          if (!v->is_scalar() && tainted[static_cast<size_t>(v->storage)]) free = false;
        if (free) {
          attach[k] = 1;
          for (const View* v :
               {&a->param, &a->exp_avg, &a->exp_avg_sq, &a->decay, &a->step_size, &a->inv_sqrt_bc2})
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
    for (size_t k = p_.steps.size(); k-- > li + 1;) {
      if (attach[k]) continue;
      bool makes = false;
      for (int s : writes(p_.steps[k]))
        if (needed[static_cast<size_t>(s)]) makes = true;
      if (!makes) continue;
      hoist[k] = 1;
      for (int s : reads(p_.steps[k])) needed[static_cast<size_t>(s)] = 1;
    }
    if (std::find(attach.begin(), attach.end(), 1) == attach.end()) continue;
    std::vector<Step> before, after;
    LoopStep moved = std::move(*loop);
    for (size_t k = li + 1; k < p_.steps.size(); ++k) {
      if (attach[k])
        moved.updates.push_back(std::move(std::get<AdamWStep>(p_.steps[k])));
      else
        (hoist[k] ? before : after).push_back(std::move(p_.steps[k]));
    }
    p_.steps.resize(li);
    for (Step& st : before) p_.steps.push_back(std::move(st));
    li = p_.steps.size();
    metrics::updates_beside_loops.add(static_cast<int64_t>(moved.updates.size()));
    p_.steps.emplace_back(std::move(moved));
    for (Step& st : after) p_.steps.push_back(std::move(st));
  }
}

// Loop-invariant steps (Program::invariant_steps), in a body's program: the steps that read
// none of the body's inputs, only its own leaves, scalars and what other such steps wrote
// (a layer's rotary tables and causal mask), move to the front, and a loop runs them once
// before its first iteration (XLA's while-loop invariant code motion, a step at a time).
// Only arena writes move: the body's results are written where each iteration says.
void Lowering::hoist_invariants() {
  if (first_input_ < 0) return;
  const size_t ns = p_.storages.size();
  std::vector<int> writers(ns, 0), invariant_writers(ns, 0);
  for (const Step& st : p_.steps)
    for_each_write(st, [&](int s) {
      if (s >= 0) ++writers[static_cast<size_t>(s)];
    });
  auto invariant = [&](int s) {
    const Storage& st = p_.storages[static_cast<size_t>(s)];
    if (st.kind == StorageKind::Param) return st.slot < first_input_;
    return writers[static_cast<size_t>(s)] > 0 &&
           invariant_writers[static_cast<size_t>(s)] == writers[static_cast<size_t>(s)];
  };
  std::vector<Step> front, rest;
  for (Step& st : p_.steps) {
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
    } else {
      hoist = false;
    }
    for (const View* v : reads) hoist = hoist && (v->is_scalar() || invariant(v->storage));
    std::vector<int> writes;
    for_each_write(st, [&](int s) {
      writes.push_back(s);
      hoist = hoist && s >= 0 && p_.storages[static_cast<size_t>(s)].kind == StorageKind::Arena;
    });
    if (!hoist) {
      rest.push_back(std::move(st));
      continue;
    }
    for (int s : writes) ++invariant_writers[static_cast<size_t>(s)];
    front.push_back(std::move(st));
  }
  p_.invariant_steps = static_cast<int>(front.size());
  for (Step& st : rest) front.push_back(std::move(st));
  p_.steps = std::move(front);
}

// Each loop's X inputs in the order its body first reads them (LoopStep::x_order): the
// order in which the backend reads the next iteration's slices ahead.
void Lowering::order_loop_reads() {
  for (Step& st : p_.steps) {
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

// Liveness-based first-fit placement of arena storages: a storage is placed before the
// first step that touches it and freed after the last, so steps never overlap their
// inputs with their outputs.
void Lowering::plan_arena() {
  const int ns = static_cast<int>(p_.storages.size());
  const int nsteps = static_cast<int>(p_.steps.size());
  const auto [first, last] = storage_uses(p_);
  std::vector<std::vector<int>> starts(nsteps), ends(nsteps);
  for (int s = 0; s < ns; ++s)
    if (p_.storages[s].kind == StorageKind::Arena && last[s] >= 0) {
      starts[first[s]].push_back(s);
      ends[last[s]].push_back(s);
    }
  std::map<int64_t, int64_t> free_blocks;  // offset -> size
  int64_t top = 0;
  auto align = [](int64_t b) { return (std::max<int64_t>(b, 1) + 63) / 64 * 64; };
  for (int i = 0; i < nsteps; ++i) {
    for (int s : starts[i]) {
      int64_t need = align(p_.storages[s].bytes);
      auto best = free_blocks.end();
      for (auto it = free_blocks.begin(); it != free_blocks.end(); ++it)
        if (it->second >= need && (best == free_blocks.end() || it->second < best->second))
          best = it;
      if (best != free_blocks.end()) {
        p_.storages[s].offset = best->first;
        int64_t rest = best->second - need, off = best->first + need;
        free_blocks.erase(best);
        if (rest > 0) free_blocks[off] = rest;
      } else {
        p_.storages[s].offset = top;
        top += need;
      }
    }
    for (int s : ends[i]) {
      int64_t off = p_.storages[s].offset, size = align(p_.storages[s].bytes);
      auto next = free_blocks.find(off + size);
      if (next != free_blocks.end()) {
        size += next->second;
        free_blocks.erase(next);
      }
      auto it = free_blocks.lower_bound(off);
      if (it != free_blocks.begin()) {
        auto prev = std::prev(it);
        if (prev->first + prev->second == off) {
          prev->second += size;
          continue;
        }
      }
      free_blocks[off] = size;
    }
  }
  p_.arena_bytes = top;
}

}  // namespace

// Outputs that can take a parameter's buffer (Program::donations): written by a fused step
// or an AdamW update, the step that reads that parameter last, at the same positions in the
// same layout (each tile, or element, is read before it is written). A parameter that is
// also a result, or read in another layout by the same step, is never given.
void Lowering::find_donations() {
  const int ns = static_cast<int>(p_.storages.size());
  const int nsteps = static_cast<int>(p_.steps.size());
  const auto [first, last] = storage_uses(p_);
  std::vector<char> taken(ns, 0);
  for (const ResultBinding& b : p_.results)  // a parameter handed back as a result is kept
    if (p_.storages[b.storage].kind == StorageKind::Param) taken[b.storage] = 1;
  auto same_layout = [](const View& a, const View& b) {
    return !a.is_scalar() && !b.is_scalar() && a.dtype == b.dtype && a.shape == b.shape &&
           a.strides == b.strides && a.offset == b.offset;
  };
  // `reads`: every view of the parameter's storage that step i reads
  auto consider = [&](int i, const View& out, const View& in,
                      const std::vector<const View*>& reads) {
    if (out.is_scalar() || in.is_scalar()) return;
    const Storage &so = p_.storages[out.storage], &sp = p_.storages[in.storage];
    if (so.kind != StorageKind::Output || sp.kind != StorageKind::Param || so.bytes != sp.bytes ||
        first[out.storage] != i || last[in.storage] != i || taken[out.storage] || taken[in.storage])
      return;
    for (const View* r : reads)
      if (!same_layout(*r, out)) return;
    taken[out.storage] = taken[in.storage] = 1;
    p_.donations.push_back({so.slot, sp.slot});
  };
  for (int i = 0; i < nsteps; ++i) {
    if (auto* a = std::get_if<AdamWStep>(&p_.steps[i])) {
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
    } else if (auto* l = std::get_if<LoopStep>(&p_.steps[i])) {
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
    } else if (auto* f = std::get_if<FusedStep>(&p_.steps[i])) {
      for (const auto& st : f->stores)
        for (const View& in : f->loads) {
          if (in.is_scalar()) continue;
          std::vector<const View*> reads;
          for (const View& v : f->loads)
            if (!v.is_scalar() && v.storage == in.storage) reads.push_back(&v);
          consider(i, st.dst, in, reads);
        }
    }
  }
}

// Adjacent products that may run at the same time (MatmulStep::beside_next), once the arena
// is planned: an arena storage freed after one step may be the next step's output, so the
// check is on the bytes each touches, not only on storage ids.
void Lowering::pair_products() {
  auto overlap = [&](int x, int y) {
    if (x == y) return true;
    const Storage& a = p_.storages[static_cast<size_t>(x)];
    const Storage& b = p_.storages[static_cast<size_t>(y)];
    if (a.kind != StorageKind::Arena || b.kind != StorageKind::Arena) return false;
    return a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
  };
  for (size_t i = 0; i + 1 < p_.steps.size(); ++i) {
    if (static_cast<int>(i) + 1 == p_.invariant_steps) continue;  // a loop runs those apart
    auto* x = std::get_if<MatmulStep>(&p_.steps[i]);
    const auto* y = std::get_if<MatmulStep>(&p_.steps[i + 1]);
    if (x == nullptr || y == nullptr) continue;
    const int xo = x->out_storage, yo = y->out_storage;
    if (overlap(xo, y->a.storage) || overlap(xo, y->b.storage) || overlap(xo, yo) ||
        overlap(yo, x->a.storage) || overlap(yo, x->b.storage))
      continue;
    x->beside_next = true;
    ++i;  // pairs, not chains
  }
}

Program lower(const ir::Graph& g, int first_input) {
  return Lowering(g, first_input).run();
}

namespace {
struct BodyPrograms {
  std::mutex mu;
  LruCache<std::shared_ptr<const Program>> programs{compile_cache_capacity()};
};
BodyPrograms& body_programs() {
  static auto* p = new BodyPrograms();  // used by executables that may outlive statics
  return *p;
}
}  // namespace

std::shared_ptr<const Program> body_program(const ir::Body& body) {
  // Bodies with one hash have one structure; their constants are slots, not values.
  BodyPrograms& bp = body_programs();
  {
    std::lock_guard<std::mutex> lock(bp.mu);
    if (auto* p = bp.programs.find(body.hash)) return *p;
  }
  // The body's inputs become parameters after its own Data leaves.
  ir::Graph g = body.graph;
  const int nd = static_cast<int>(g.param_nodes.size());
  g.param_nodes.resize(static_cast<size_t>(nd + body.num_inputs), -1);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    ir::GNode& n = g.nodes[k];
    if (n.op != OpKind::Param) continue;
    n.op = OpKind::Data;
    n.param = nd + static_cast<int>(n.attrs[0]);
    n.attrs = ir::Attrs{};
    g.param_nodes[static_cast<size_t>(n.param)] = static_cast<int>(k);
  }
  auto prog = std::make_shared<const Program>(lower(optimize(g), nd));
  metrics::body_compile_count.add();
  std::lock_guard<std::mutex> lock(bp.mu);
  if (auto* p = bp.programs.find(body.hash)) return *p;  // compiled meanwhile on another thread
  metrics::cache_evictions.add(static_cast<int64_t>(bp.programs.insert(body.hash, prog)));
  return prog;
}

void clear_body_programs() {
  BodyPrograms& bp = body_programs();
  std::lock_guard<std::mutex> lock(bp.mu);
  bp.programs.clear();
}

}  // namespace lazytrace::compiler
