// Lowering: layout ops become views, elementwise chains become fused steps (one pass
// over tiles), products, reductions, gathers, calls, loops and updates their steps; then the
// program passes (plan/pipeline.cpp) plan the arena, donations and the rest.
#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

#include "backends/cpu/lowering_passes.h"
#include "backends/cpu/plan/pipeline.h"
#include "backends/cpu/program.h"
#include "backends/cpu/views.h"
#include "compiler/compile_cache.h"
#include "compiler/passes.h"
#include "core/check.h"
#include "core/hash.h"
#include "core/lru_cache.h"
#include "ir/body.h"
#include "ir/shape_rules.h"
#include "lazytrace/core/error.h"
#include "metrics/known.h"
#include "runtime/communicator.h"

namespace lazytrace::cpu {
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
  Lowering(const ir::Graph& g, int first_input, runtime::PassSet passes)
      : g_(g),
        first_input_(first_input),
        passes_(passes),
        vals_(g.nodes.size()),
        uses_(g),
        unstacked_(passes.on(runtime::Pass::SlicesInPlace) ? stacks_read_in_place(g, uses_)
                                                           : std::vector<char>(g.nodes.size())) {}

  Program run() {
    p_.name = g_.name;
    p_.num_params = static_cast<int>(g_.param_nodes.size());
    p_.num_scalars = static_cast<int>(g_.scalar_nodes.size());
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      lowering_ = static_cast<int>(i);
      lower_node(lowering_);
    }
    bind_results();
    for (size_t gi = 0; gi < groups_.size(); ++gi)
      if (groups_[gi].step_index != -2) seal(static_cast<int>(gi));
    p_.passes = passes_;
    plan::run(p_, {first_input_, passes_});
    return std::move(p_);
  }

 private:
  int new_storage(const Shape& shape, DType dt, StorageKind kind = StorageKind::Arena) {
    Storage s;
    s.kind = kind;
    s.bytes = shape.numel() * static_cast<int64_t>(itemsize(dt));
    if (kind == StorageKind::Output) s.slot = p_.num_outputs++;
    if (kind == StorageKind::Arena && s.bytes > largest_) {
      largest_ = s.bytes;
      p_.largest_intermediate =
          detail::cat(ir::op_name(g_.nodes[lowering_].op), ", ", dtype_name(dt), shape.str());
    }
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

  void lower_node(int i) {
    const GNode& n = g_.nodes[i];
    if (unstacked_[static_cast<size_t>(i)]) return;  // read part by part by the loops
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
    if (n.op == OpKind::AdamW || n.op == OpKind::AdamWProduct) return lower_adamw(i);
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
    if (ir::is_collective(n.op)) {
      CollectiveStep cs;
      cs.op = n.op;
      cs.in = use_contiguous(n.inputs[0]);
      cs.reduce = static_cast<runtime::ReduceOp>(n.attrs[0]);
      cs.scale = n.attrs.get_double(1);
      cs.ranks = n.attrs[2];
      cs.root = static_cast<int>(n.attrs[3]);
      cs.out_storage = new_storage(n.shape, n.dtype);
      uint64_t h = hash_combine(static_cast<uint64_t>(n.op), n.attrs.hash());
      h = hash_combine(h, static_cast<uint64_t>(cs.in.shape.numel()));
      h = hash_combine(h, static_cast<uint64_t>(n.dtype));
      // what the hash holds, so that two ranks' texts differ where their hashes do
      const bool reduces = n.op == OpKind::AllReduce || n.op == OpKind::ReduceScatter;
      std::string text = ir::op_name(n.op);
      if (reduces) text += detail::cat(" ", runtime::reduce_op_name(cs.reduce));
      if (reduces && cs.scale != 1) text += detail::cat(" x ", cs.scale);
      if (n.op == OpKind::Broadcast) text += detail::cat(" from rank ", cs.root);
      add_collectives(h, detail::cat(text, " ", dtype_name(n.dtype), cs.in.shape.str()));
      p_.steps.emplace_back(std::move(cs));
      set_storage_value(i, std::get<CollectiveStep>(p_.steps.back()).out_storage);
      return;
    }
    if (n.op == OpKind::CheckTargets) {
      CheckStep cs{use_memory_view(n.inputs[0]), n.attrs[0], n.attrs[1], n.attrs[2]};
      vals_[i].kind = Value::AsView;
      vals_[i].view = cs.targets;
      p_.steps.emplace_back(std::move(cs));
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
      return passes_.on(runtime::Pass::Fusion) && v.kind == Value::Reg &&
             groups_[v.group].step_index < 0 && g_.nodes[in].shape == n.shape;
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
    Value& out = vals_[i];
    out.kind = Value::AsView;
    out.view = layout_view(n, use_view(n.inputs[0]));
    if (!passes_.on(runtime::Pass::Views) && !out.view.is_scalar()) {  // a copy instead
      const int s = copy_to_new(out.view, StorageKind::Arena);
      out.view = contiguous_view(s, out.view.dtype, out.view.shape);
    }
  }

  // The view layout op `n` makes of its operand's view `v`.
  View layout_view(const GNode& n, const View& v) {
    switch (n.op) {
      case OpKind::Reshape: {
        if (auto r = reshape_view(v, n.shape)) return *r;
        const int s = copy_to_new(v, StorageKind::Arena);
        return contiguous_view(s, v.dtype, n.shape);
      }
      case OpKind::Permute:
        return permute_view(v, n.attrs.begin());
      case OpKind::BroadcastTo:
        return broadcast_view(v, n.shape);
      case OpKind::Slice:
        return slice_view(v, static_cast<int>(n.attrs[0]), n.attrs[1], n.attrs[2],
                          n.shape[static_cast<int>(n.attrs[0])]);
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

  void lower_matmul(int i) {
    const GNode& n = g_.nodes[i];
    MatmulStep ms;
    ms.a = matmul_operand(n.inputs[0], false);
    ms.b = matmul_operand(n.inputs[1], true);
    if (n.shape.size() == 2 && ms.a.shape.size() == 2 && ms.b.shape.size() == 2 &&
        passes_.on(runtime::Pass::TransposedProducts) && computed_transposed(g_, uses_, i)) {
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
      ResultBinding b{-1, n.shape, n.dtype, ir::op_name(n.op)};
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

  // A call: the body's program (compiled once per body) runs on the caller's memory. The
  // call's inputs are the body's inputs, then its Data leaves, then its scalar leaves.
  void lower_call(int i) {
    const GNode& n = g_.nodes[i];
    const ir::Body& body = n.body();
    std::shared_ptr<const Program> prog = body_program(body, passes_);
    if (prog->collectives)
      add_collectives(prog->collectives, "call(" + prog->collectives_text + ")");
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
      if (st.kind == StorageKind::Param) {  // the body returns an input, maybe reshaped
        std::optional<View> v = reshape_view(cs.params[static_cast<size_t>(st.slot)], b.shape);
        LT_CHECK(v.has_value(), "a call's contiguous input reshapes without a copy");
        results.push_back(*v);
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

  // AdamW, or AdamWProduct (grad_product.cpp), whose gradient the update computes itself
  // from the two operands of its product, a block of rows at a time.
  void lower_adamw(int i) {
    const GNode& n = g_.nodes[i];
    AdamWStep s;
    const bool product = n.op == OpKind::AdamWProduct;
    if (product) {
      MatmulStep ms;
      ms.a = matmul_operand(n.inputs[1], false);
      ms.b = matmul_operand(n.inputs[2], true);
      ms.out_storage = -1;
      ms.out_shape = n.shape;
      ms.dtype = n.dtype;
      if (n.attrs.flag) {  // the gradient is the product's transpose: (a b)ᵀ = bᵀ aᵀ
        static const int64_t swap[2] = {1, 0};
        std::swap(ms.a, ms.b);
        ms.a = permute_view(ms.a, swap);
        ms.b = permute_view(ms.b, swap);
      }
      s.grad_product = std::move(ms);
    }
    // param, grad (AdamW only), exp_avg, exp_avg_sq, the three numbers, then (AdamWProduct)
    // maybe the gradient's factor
    const int p = product ? 1 : 0;  // AdamWProduct: one operand more before the moments
    s.param = use_contiguous(n.inputs[0]);
    if (!product) s.grad = use_contiguous(n.inputs[1]);
    s.exp_avg = use_contiguous(n.inputs[2 + p]);
    s.exp_avg_sq = use_contiguous(n.inputs[3 + p]);
    View* numbers[] = {&s.decay, &s.step_size, &s.inv_sqrt_bc2};
    for (int k = 0; k < 3; ++k) *numbers[k] = use_view(n.inputs[4 + p + k]);
    if (product && n.inputs.size() == 9) s.grad_scale = use_view(n.inputs[8]);
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

  // Appends collectives a run issues, in order, to the program's signature. (A while loop's
  // iteration count is not in it: its condition must agree across ranks, e.g. computed
  // from an all_reduce.)
  void add_collectives(uint64_t h, const std::string& text) {
    p_.collectives = hash_combine(p_.collectives ? p_.collectives : 0x636f6c6c, h);
    p_.collectives_text += (p_.collectives_text.empty() ? "" : ", ") + text;
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
    const ir::Loop& loop = n.loop();
    LoopStep ls;
    ls.kind = loop.kind;
    ls.length = loop.length;
    ls.reverse = loop.reverse;
    ls.body = body_program(*loop.body, passes_);
    if (loop.cond) ls.cond = body_program(*loop.cond, passes_);
    if (ls.body->collectives || (ls.cond && ls.cond->collectives))
      add_collectives(
          hash_combine(hash_combine(ls.body->collectives, ls.cond ? ls.cond->collectives : 0),
                       static_cast<uint64_t>(ls.length)),
          (ls.kind == ir::Loop::Kind::While ? std::string("while (")
                                            : detail::cat("scan of ", ls.length, " (")) +
              (ls.cond ? ls.cond->collectives_text + "; " : "") + ls.body->collectives_text + ")");
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
  runtime::PassSet passes_;
  Program p_;
  int lowering_ = 0;     // the node lower_node is at
  int64_t largest_ = 0;  // the largest intermediate storage so far
  std::vector<Value> vals_;
  std::vector<Group> groups_;
  std::vector<std::vector<int>> writers_;
  std::map<int, int> param_storages_;
  std::map<int, std::vector<View>> call_results_;
  GraphUses uses_;
  std::vector<char> unstacked_;  // stacks the loops read part by part (slices_in_place)
};

}  // namespace

Program lower(const ir::Graph& g, int first_input, runtime::PassSet passes) {
  return Lowering(g, first_input, passes).run();
}

namespace {
struct BodyPrograms {
  std::mutex mu;
  LruCache<std::shared_ptr<const Program>> programs{compiler::compile_cache_capacity()};
};
BodyPrograms& body_programs() {
  static auto* p = new BodyPrograms();  // used by executables that may outlive statics
  return *p;
}
}  // namespace

std::shared_ptr<const Program> body_program(const ir::Body& body, runtime::PassSet passes) {
  // Bodies with one hash have one structure; their constants are slots, not values.
  const uint64_t key =
      runtime::current_communicator().overlap_key(hash_combine(body.hash, passes.off_bits()));
  BodyPrograms& bp = body_programs();
  {
    std::lock_guard<std::mutex> lock(bp.mu);
    if (auto* p = bp.programs.find(key)) return *p;
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
  auto prog = std::make_shared<const Program>(lower(compiler::optimize(g, passes), nd, passes));
  metrics::body_compile_count.add();
  std::lock_guard<std::mutex> lock(bp.mu);
  if (auto* p = bp.programs.find(key)) return *p;  // compiled meanwhile on another thread
  metrics::cache_evictions.add(static_cast<int64_t>(bp.programs.insert(key, prog)));
  return prog;
}

void clear_body_programs() {
  BodyPrograms& bp = body_programs();
  std::lock_guard<std::mutex> lock(bp.mu);
  bp.programs.clear();
}

}  // namespace lazytrace::cpu
