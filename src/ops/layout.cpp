// Layout ops: reshape, permute, broadcast, slice, concat, stack, index_select and
// index_add, each with its VJP rule (composite ops such as select and stack get theirs
// from their parts). The compiler turns the first four into strided views; nothing is
// copied for them.
#include <numeric>

#include "ops/op_helpers.h"

namespace lazytrace {
namespace {

using ir::OpKind;

Tensor layout(OpKind op, const Tensor& t, Shape shape, ir::Attrs a = {}) {
  return trace::make_pending(ir::make_node(op, t.dtype(), std::move(shape), trace::node_of(t), a));
}

// The gradient of a slice: g in the sliced positions, zeros elsewhere. A contiguous slice
// pads with zeros by concat; a strided one adds g at its positions.
Tensor slice_backward(const Tensor& g, const Shape& in, int dim, int64_t start, int64_t step) {
  const int64_t len = g.shape()[dim];
  if (step == 1) {
    std::vector<Tensor> parts;
    Shape before = in, after = in;
    before[dim] = start;
    after[dim] = in[dim] - start - len;
    if (before[dim] > 0) parts.push_back(zeros(before, g.dtype()));
    parts.push_back(g);
    if (after[dim] > 0) parts.push_back(zeros(after, g.dtype()));
    return concat(parts, dim);
  }
  Tensor positions = arange(static_cast<double>(start), static_cast<double>(start + len * step),
                            static_cast<double>(step));
  return index_add(zeros(in, g.dtype()), dim, positions, g);
}

}  // namespace

Tensor reshape(const Tensor& t, const Shape& shape) {
  trace::OpScope scope;
  ops::check_defined("reshape", t);
  Shape out = ir::reshape_shape(t.shape(), shape.vec());
  if (out == t.shape()) return t;
  TensorImpl& impl = *t.impl();
  // a materialized buffer is already contiguous: share it (not an outer one while tracing:
  // that is an input of the traced function)
  Tensor result = impl.pending() || trace::is_outer(t)
                      ? layout(OpKind::Reshape, t, out)
                      : trace::make_materialized(impl.materialized(), impl.dtype, out);
  if (ops::needs_grad(t))
    ops::record_grad(result, "reshape", {&t}, [in = t.shape()](const Tensor& g) {
      return std::vector<Tensor>{reshape(g, in)};
    });
  return result;
}

Tensor permute(const Tensor& t, std::vector<int> perm) {
  trace::OpScope scope;
  ops::check_defined("permute", t);
  Shape out = ir::permute_shape(t.shape(), perm);
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int>(i);
  if (identity) return t;
  ir::Attrs a;
  for (int p : perm) a.push(p);
  Tensor result = layout(OpKind::Permute, t, out, a);
  if (ops::needs_grad(t)) {
    FixedVec<int, 6> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) {
      int p = perm[i] < 0 ? perm[i] + t.ndim() : perm[i];
      inverse[static_cast<size_t>(p)] = static_cast<int>(i);
    }
    ops::record_grad(result, "permute", {&t}, [inverse = std::move(inverse)](const Tensor& g) {
      return std::vector<Tensor>{permute(g, std::vector<int>(inverse.begin(), inverse.end()))};
    });
  }
  return result;
}

Tensor transpose(const Tensor& t, int dim0, int dim1) {
  trace::OpScope scope;
  ops::check_defined("transpose", t);
  int nd = t.ndim();
  if (nd < 2 && (dim0 == -2 && dim1 == -1)) return t;  // like torch .T on 0-d and 1-d
  dim0 = ir::normalize_dim("transpose", dim0, nd, t.shape());
  dim1 = ir::normalize_dim("transpose", dim1, nd, t.shape());
  if (nd == 0) return t;  // dims 0 and -1 of a 0-d tensor, as torch: itself
  std::vector<int> perm(static_cast<size_t>(nd));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(dim0)], perm[static_cast<size_t>(dim1)]);
  return permute(t, perm);
}

Tensor broadcast_to(const Tensor& t, const Shape& shape) {
  trace::OpScope scope;
  ops::check_defined("broadcast_to", t);
  ir::check_broadcast_to("broadcast_to", t.shape(), shape);
  if (shape == t.shape()) return t;
  Tensor result = layout(OpKind::BroadcastTo, t, shape);
  // record_grad sums the gradient back to t's shape
  if (ops::needs_grad(t))
    ops::record_grad(result, "broadcast_to", {&t},
                     [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return result;
}

Tensor slice(const Tensor& t, int dim, int64_t start, int64_t stop, int64_t step) {
  trace::OpScope scope;
  ops::check_defined("slice", t);
  Shape out = ir::slice_shape(t.shape(), dim, start, stop, step);
  if (out == t.shape() && start == 0) return t;
  ir::Attrs a;
  a.push(dim);
  a.push(start);
  a.push(step);
  Tensor result = layout(OpKind::Slice, t, out, a);
  if (ops::needs_grad(t)) {
    // the normalized dim and start, as the shape rule resolved them
    dim = ir::normalize_dim("slice", dim, t.ndim(), t.shape());
    const int64_t n = t.shape()[dim];
    if (start < 0) start = std::max<int64_t>(start + n, 0);
    ops::record_grad(result, "slice", {&t}, [=, in = t.shape()](const Tensor& g) {
      return std::vector<Tensor>{slice_backward(g, in, dim, start, step)};
    });
  }
  return result;
}

Tensor select(const Tensor& t, int dim, int64_t index) {
  trace::OpScope scope;
  ops::check_defined("select", t);
  if (t.ndim() == 0) fail("select", "cannot index a 0-d tensor.");
  dim = ir::normalize_dim("select", dim, t.ndim(), t.shape());
  int64_t n = t.shape()[dim];
  if (index < -n || index >= n)
    fail("select", "index ", index, " is out of range for dim ", dim, " of size ", n, " (shape ",
         t.shape().str(), "); expected an index in [", -n, ", ", n - 1, "].");
  if (index < 0) index += n;
  return squeeze(slice(t, dim, index, index + 1), dim);
}

Tensor unsqueeze(const Tensor& t, int dim) {
  trace::OpScope scope;
  ops::check_defined("unsqueeze", t);
  dim = ir::normalize_dim("unsqueeze", dim, t.ndim() + 1, Shape(t.shape()));
  std::vector<int64_t> s = t.shape().vec();
  s.insert(s.begin() + dim, 1);
  return reshape(t, Shape(s));
}

Tensor squeeze(const Tensor& t, int dim) {
  trace::OpScope scope;
  ops::check_defined("squeeze", t);
  dim = ir::normalize_dim("squeeze", dim, t.ndim(), t.shape());
  if (t.ndim() == 0) return t;  // dim 0 (or -1) of a 0-d tensor, as torch: the tensor
  if (t.shape()[dim] != 1)
    fail("squeeze", "dim ", dim, " of shape ", t.shape().str(), " has size ", t.shape()[dim],
         ", not 1; only size-1 dims can be squeezed.");
  std::vector<int64_t> s = t.shape().vec();
  s.erase(s.begin() + dim);
  return reshape(t, Shape(s));
}

Tensor concat(const std::vector<Tensor>& tensors, int dim) {
  trace::OpScope scope;
  if (tensors.empty()) fail("concat", "needs at least one tensor.");
  std::vector<Shape> shapes;
  DType common = DType::bool_;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ops::check_defined("concat", tensors[i], "tensors");
    shapes.push_back(tensors[i].shape());
    common = i == 0 ? tensors[i].dtype() : promote_types(common, tensors[i].dtype());
  }
  Shape out = ir::concat_shape(shapes, dim);
  if (tensors.size() == 1) return astype(tensors[0], common);
  std::vector<ir::NodePtr> ins;
  for (const Tensor& t : tensors) ins.push_back(ops::node_as(t, common));
  ir::Attrs a;
  a.push(dim);
  Tensor result =
      trace::make_pending(ir::make_node(OpKind::Concat, common, out, std::move(ins), a));
  bool any = false;
  for (const Tensor& t : tensors) any |= ops::needs_grad(t);
  if (any) {
    dim = ir::normalize_dim("concat", dim, out.size(), out);
    FixedVec<int64_t, 4> sizes(tensors.size());
    FixedVec<const Tensor*, 4> inputs(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      sizes[i] = tensors[i].shape()[dim];
      inputs[i] = &tensors[i];
    }
    ops::record_grad(result, "concat",
                     std::span<const Tensor* const>(inputs.begin(), inputs.size()),
                     [dim, sizes = std::move(sizes)](const Tensor& g) {
                       std::vector<Tensor> grads;
                       int64_t at = 0;
                       for (int64_t n : sizes) {
                         grads.push_back(slice(g, dim, at, at + n));
                         at += n;
                       }
                       return grads;
                     });
  }
  return result;
}

Tensor stack(const std::vector<Tensor>& tensors, int dim) {
  trace::OpScope scope;
  if (tensors.empty()) fail("stack", "needs at least one tensor.");
  for (size_t i = 0; i < tensors.size(); ++i) {
    ops::check_defined("stack", tensors[i], "tensors");
    if (tensors[i].shape() != tensors[0].shape())
      fail("stack", "tensor ", i, " has shape ", tensors[i].shape().str(),
           " but tensor 0 has shape ", tensors[0].shape().str(),
           "; stacked tensors must all have the same shape.");
  }
  dim = ir::normalize_dim("stack", dim, tensors[0].ndim() + 1, tensors[0].shape());
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, dim));
  return concat(parts, dim);
}

Tensor index_select(const Tensor& t, int dim, const Tensor& index) {
  trace::OpScope scope;
  ops::check_defined("index_select", t);
  ops::check_defined("index_select", index, "index");
  if (index.dtype() != DType::int32 && index.dtype() != DType::int64)
    fail("index_select", "the index must be int32 or int64, got ", ops::type_of(index),
         "; convert it with astype(index, lt::int64).");
  Shape out = ir::index_select_shape(t.shape(), dim, index.shape());
  if (out.numel() > 0 && t.shape()[dim] == 0)
    fail("index_select", "cannot pick from dim ", dim, " of size 0 (shape ", t.shape().str(), ").");
  ir::Attrs a;
  a.push(dim);
  Tensor result = trace::make_pending(ir::make_node(OpKind::IndexSelect, t.dtype(), out,
                                                    trace::node_of(t), trace::node_of(index), a));
  if (ops::needs_grad(t))
    ops::record_grad(
        result, "index_select", {&t, nullptr},
        [dim, index = ops::SavedInput("index_select", index), in = t.shape()](const Tensor& g) {
          return std::vector<Tensor>{index_add(zeros(in, g.dtype()), dim, index.get(), g),
                                     Tensor()};
        });
  return result;
}

Tensor index_add(const Tensor& t, int dim, const Tensor& index, const Tensor& source) {
  trace::OpScope scope;
  ops::check_defined("index_add", t);
  ops::check_defined("index_add", index, "index");
  ops::check_defined("index_add", source, "source");
  if (index.dtype() != DType::int32 && index.dtype() != DType::int64)
    fail("index_add", "the index must be int32 or int64, got ", ops::type_of(index),
         "; convert it with astype(index, lt::int64).");
  if (t.dtype() == DType::bool_)
    fail("index_add", "is not defined for bool tensors (got ", ops::type_of(t),
         "); convert first with astype(t, lt::float32).");
  ir::check_index_add(t.shape(), dim, index.shape(), source.shape());
  if (source.numel() > 0 && t.shape()[dim] == 0)
    fail("index_add", "cannot add into dim ", dim, " of size 0 (shape ", t.shape().str(), ").");
  ir::Attrs a;
  a.push(dim);
  Tensor result =
      trace::make_pending(ir::make_node(OpKind::IndexAdd, t.dtype(), t.shape(), trace::node_of(t),
                                        trace::node_of(index), ops::node_as(source, t.dtype()), a));
  if (ops::needs_grad(t, source))
    ops::record_grad(result, "index_add", {&t, nullptr, &source},
                     [dim, index = ops::SavedInput("index_add", index)](const Tensor& g) {
                       return std::vector<Tensor>{g, Tensor(), index_select(g, dim, index.get())};
                     });
  return result;
}

}  // namespace lazytrace
