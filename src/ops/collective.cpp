// Collectives (ir ops all_reduce, reduce_scatter, all_gather, broadcast), each with its VJP
// rule: a data-parallel step's loss is the sum of the ranks' losses, so an op's gradient is
// itself a collective (all_gather and reduce_scatter are each other's).
#include "ops/op_helpers.h"
#include "runtime/communicator.h"

namespace lazytrace {
namespace {

using ir::OpKind;
using runtime::ReduceOp;

int64_t ranks() {
  return runtime::current_communicator().size();
}

ReduceOp parse_reduce(const char* name, std::string_view op, const Tensor& t, double& scale) {
  if (op == "sum") return ReduceOp::Sum;
  if (op == "max") return ReduceOp::Max;
  if (op == "min") return ReduceOp::Min;
  if (op == "mean") {
    if (!is_floating(t.dtype()))
      fail(name, "op 'mean' needs a floating tensor, got ", ops::type_of(t),
           "; use 'sum', or convert first with astype(t, lt::float32).");
    scale /= static_cast<double>(ranks());
    return ReduceOp::Sum;
  }
  fail(name, "unknown reduction '", op, "'; use 'sum', 'mean', 'max' or 'min'.");
}

Tensor collective(OpKind kind, const Tensor& t, ReduceOp reduce, double scale, int root) {
  trace::OpScope scope;
  const char* name = ir::op_name(kind);
  ops::check_defined(name, t);
  const int64_t n = ranks();
  if (scale != 1 && !is_floating(t.dtype()))
    fail(name, "a scale (", scale, ") needs a floating tensor, got ", ops::type_of(t), ".");
  if (root < 0 || root >= n)
    fail(name, "root ", root, " is not a rank: there are ", n, " (",
         runtime::current_communicator().describe(), ").");
  const Shape out = ir::collective_shape(kind, t.shape(), n);
  ir::Attrs a;
  a.push(static_cast<int64_t>(reduce));
  a.push_double(scale);
  a.push(n);
  a.push(root);
  Tensor result = trace::make_pending(ir::make_node(kind, t.dtype(), out, trace::node_of(t), a));
  if (!ops::needs_grad(t)) return result;
  if (kind == OpKind::Broadcast)
    fail(name,
         "is not differentiable: broadcast values that need no gradient (under "
         "lt::NoGradGuard, or detach() them), e.g. the initial parameters.");
  if (kind == OpKind::ReduceScatter && reduce != ReduceOp::Sum)
    fail(name, "op '", runtime::reduce_op_name(reduce),
         "' is not differentiable; use all_reduce, whose max and min are.");
  if (kind == OpKind::AllReduce && reduce != ReduceOp::Sum) {
    // the gradient goes to the ranks holding the extreme value, split evenly among ties
    // (all_reduce records max and min with a scale as the unscaled one, then a product)
    ops::record_grad(result, name, {&t},
                     [x = ops::SavedInput(name, t), y = ops::SavedResult(result)](const Tensor& g) {
                       Tensor hit = astype(x.get() == y.get(), g.dtype());
                       Tensor ties = all_reduce(hit, "sum");
                       return std::vector<Tensor>{all_reduce(g, "sum") * hit / ties};
                     });
    return result;
  }
  ops::record_grad(result, name, {&t}, [kind, scale](const Tensor& g) {
    if (kind == OpKind::AllReduce) return std::vector<Tensor>{all_reduce(g, "sum", scale)};
    if (kind == OpKind::AllGather) return std::vector<Tensor>{reduce_scatter(g, "sum")};
    Tensor full = all_gather(g);  // ReduceScatter
    return std::vector<Tensor>{scale == 1 ? full : full * scale};
  });
  return result;
}

}  // namespace

Tensor all_reduce(const Tensor& t, std::string_view op, double scale) {
  const ReduceOp r = parse_reduce("all_reduce", op, t, scale);
  if (r != ReduceOp::Sum && scale != 1)  // so the gradient finds the extreme exactly
    return collective(OpKind::AllReduce, t, r, 1.0, 0) * scale;
  return collective(OpKind::AllReduce, t, r, scale, 0);
}

Tensor reduce_scatter(const Tensor& t, std::string_view op, double scale) {
  const ReduceOp r = parse_reduce("reduce_scatter", op, t, scale);
  return collective(OpKind::ReduceScatter, t, r, scale, 0);
}

Tensor all_gather(const Tensor& t) {
  return collective(OpKind::AllGather, t, ReduceOp::Sum, 1.0, 0);
}

Tensor broadcast(const Tensor& t, int root) {
  return collective(OpKind::Broadcast, t, ReduceOp::Sum, 1.0, root);
}

}  // namespace lazytrace
