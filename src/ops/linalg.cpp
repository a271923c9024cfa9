// matmul: NumPy semantics, batch dims broadcast; the backend calls BLAS.
#include "ops/op_helpers.h"

namespace lazytrace {

Tensor matmul(const Tensor& a, const Tensor& b) {
  trace::OpScope scope;
  ops::check_defined("matmul", a, "self");
  ops::check_defined("matmul", b, "other");
  DType common = ops::result_type({ops::PromoteArg::of(a), ops::PromoteArg::of(b)});
  if (common == DType::bool_)
    fail("matmul", "is not defined for bool tensors (", ops::type_of(a), ", ", ops::type_of(b),
         "); convert with astype first.");
  Shape out = ir::matmul_shape(a.shape(), b.shape());
  return trace::make_pending(ir::make_node(ir::OpKind::Matmul, common, out, ops::node_as(a, common),
                                           ops::node_as(b, common)));
}

}  // namespace lazytrace
