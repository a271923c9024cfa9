#include "ir/shape_rules.h"

#include <algorithm>

#include "lazytrace/core/error.h"

namespace lazytrace::ir {

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  if (a == b) return a;
  int n = std::max(a.size(), b.size());
  Shape out;
  for (int i = 0; i < n; ++i) {
    int ia = a.size() - n + i, ib = b.size() - n + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      fail(op, "shapes ", a.str(), " and ", b.str(), " cannot be broadcast: dimension ", i,
           " (counting from the left of the broadcast shape) is ", da, " in one and ", db,
           " in the other; sizes must match or be 1. Reshape or slice one operand.");
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

void check_broadcast_to(const char* op, const Shape& from, const Shape& to) {
  for (int64_t d : to)
    if (d < 0)
      fail(op, "negative size ", d, " in target shape ", to.str(), "; sizes must be >= 0.");
  if (from.size() > to.size())
    fail(op, "cannot broadcast shape ", from.str(), " to ", to.str(),
         ": the target has fewer dimensions. Reduce or reshape the input first.");
  int off = to.size() - from.size();
  for (int i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[off + i])
      fail(op, "cannot broadcast shape ", from.str(), " to ", to.str(), ": dimension ", i, " is ",
           from[i], " and must be 1 or ", to[off + i], ".");
}

int normalize_dim(const char* op, int64_t dim, int ndim, const Shape& shape) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  if (dim < lo || dim > hi)
    fail(op, "dim ", dim, " is out of range for a tensor of shape ", shape.str(), " (",
         shape.size(), "-d): expected a dim in [", lo, ", ", hi, "].");
  if (dim < 0) dim += ndim == 0 ? 1 : ndim;
  return static_cast<int>(dim);
}

Shape reduce_shape(const char* op, const Shape& in, std::vector<int>& dims, bool keepdim) {
  int nd = in.size();
  if (dims.empty()) {
    for (int i = 0; i < nd; ++i) dims.push_back(i);
  } else {
    for (int& d : dims)
      d = nd == 0 ? normalize_dim(op, d, 0, in) * 0 : normalize_dim(op, d, nd, in);
    std::sort(dims.begin(), dims.end());
    for (size_t i = 1; i < dims.size(); ++i)
      if (dims[i] == dims[i - 1])
        fail(op, "dim ", dims[i], " appears more than once in the reduction dims for shape ",
             in.str(), "; list each dim once.");
    if (nd == 0) dims.clear();
  }
  Shape out;
  size_t k = 0;
  for (int i = 0; i < nd; ++i) {
    bool reduced = k < dims.size() && dims[k] == i;
    if (reduced) ++k;
    if (!reduced)
      out.push_back(in[i]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

Shape matmul_shape(const Shape& a, const Shape& b) {
  if (a.size() == 0 || b.size() == 0)
    fail("matmul", "both operands must have at least 1 dimension, got shapes ", a.str(), " and ",
         b.str(), "; use * for scaling by a 0-d tensor.");
  int64_t k_a = a.back();
  int64_t k_b = b.size() == 1 ? b[0] : b[b.size() - 2];
  if (k_a != k_b)
    fail("matmul", "shapes ", a.str(), " and ", b.str(),
         " are not aligned: the last dim of the first (", k_a, ") must equal the ",
         (b.size() == 1 ? "only" : "second-to-last"), " dim of the second (", k_b,
         "). Transpose an operand or check the layer sizes.");
  Shape batch_a, batch_b;
  for (int i = 0; i + 2 < a.size(); ++i) batch_a.push_back(a[i]);
  for (int i = 0; i + 2 < b.size(); ++i) batch_b.push_back(b[i]);
  Shape out;
  try {
    out = broadcast_shapes("matmul", batch_a, batch_b);
  } catch (const Error&) {
    fail("matmul", "the batch dimensions of shapes ", a.str(), " and ", b.str(), " (",
         batch_a.str(), " and ", batch_b.str(),
         ") cannot be broadcast: each must match or be 1. Reshape or expand an operand.");
  }
  if (a.size() >= 2) out.push_back(a[a.size() - 2]);
  if (b.size() >= 2) out.push_back(b.back());
  return out;
}

Shape reshape_shape(const Shape& in, const std::vector<int64_t>& target) {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (infer >= 0)
        fail("reshape", "only one dimension can be -1, got target ", Shape(target).str(),
             " for input shape ", in.str(), ".");
      infer = static_cast<int>(i);
    } else if (target[i] < 0) {
      fail("reshape", "invalid size ", target[i], " in target ", Shape(target).str(),
           "; sizes must be >= 0 or -1 (inferred).");
    } else {
      known *= target[i];
    }
  }
  Shape out(target);
  int64_t n = in.numel();
  if (infer >= 0) {
    if (known == 0)
      fail("reshape", "cannot reshape ", in.str(), " (", n, " elements) into ", Shape(target).str(),
           ": with a size 0 among the known sizes the -1 could be any size; give every size.");
    if (n % known != 0)
      fail("reshape", "cannot reshape ", in.str(), " (", n, " elements) into ", Shape(target).str(),
           ": the known sizes do not divide the element count.");
    out[infer] = n / known;
  } else if (known != n) {
    fail("reshape", "cannot reshape ", in.str(), " (", n, " elements) into ", Shape(target).str(),
         " (", known, " elements); the element counts must match.");
  }
  return out;
}

Shape permute_shape(const Shape& in, std::vector<int>& perm) {
  int nd = in.size();
  if (static_cast<int>(perm.size()) != nd)
    fail("permute", "the permutation has ", perm.size(), " entries but the tensor of shape ",
         in.str(), " has ", nd, " dims; give one entry per dim.");
  std::vector<bool> seen(nd, false);
  Shape out;
  for (int& p : perm) {
    p = normalize_dim("permute", p, nd, in);
    if (seen[p])
      fail("permute", "dim ", p, " appears twice in the permutation for shape ", in.str(),
           "; each dim must appear exactly once.");
    seen[p] = true;
    out.push_back(in[p]);
  }
  return out;
}

Shape slice_shape(const Shape& in, int& dim, int64_t& start, int64_t& stop, int64_t step) {
  if (in.size() == 0) fail("slice", "cannot slice a 0-d tensor; reshape it to 1-d first.");
  dim = normalize_dim("slice", dim, in.size(), in);
  if (step <= 0)
    fail("slice", "step must be positive, got ", step, " (shape ", in.str(), ", dim ", dim, ").");
  int64_t n = in[dim];
  if (start < 0) start += n;
  if (stop < 0) stop += n;
  start = std::clamp<int64_t>(start, 0, n);
  stop = std::clamp<int64_t>(stop, start, n);
  Shape out = in;
  out[dim] = stop == start ? 0 : 1 + (stop - start - 1) / step;
  return out;
}

Shape concat_shape(const std::vector<Shape>& ins, int& dim) {
  if (ins.empty()) fail("concat", "needs at least one tensor.");
  const Shape& first = ins[0];
  if (first.size() == 0) fail("concat", "cannot concatenate 0-d tensors; use stack instead.");
  dim = normalize_dim("concat", dim, first.size(), first);
  Shape out = first;
  int64_t total = 0;
  for (size_t t = 0; t < ins.size(); ++t) {
    const Shape& s = ins[t];
    bool ok = s.size() == first.size();
    for (int i = 0; ok && i < s.size(); ++i)
      if (i != dim && s[i] != first[i]) ok = false;
    if (!ok)
      fail("concat", "tensor ", t, " has shape ", s.str(), " but tensor 0 has shape ", first.str(),
           "; all dims except dim ", dim, " must match.");
    total += s[dim];
  }
  out[dim] = total;
  return out;
}

Shape index_select_shape(const Shape& in, int& dim, const Shape& index) {
  if (index.size() != 1)
    fail("index_select", "the index must be 1-d, got shape ", index.str(),
         "; flatten it with reshape({-1}).");
  if (in.size() == 0) fail("index_select", "cannot index a 0-d tensor.");
  dim = normalize_dim("index_select", dim, in.size(), in);
  Shape out = in;
  out[dim] = index[0];
  return out;
}

void check_index_add(const Shape& in, int& dim, const Shape& index, const Shape& source) {
  const char* op = "index_add";
  if (index.size() != 1)
    fail(op, "the index must be 1-d, got shape ", index.str(), "; flatten it with reshape({-1}).");
  if (in.size() == 0) fail(op, "cannot index a 0-d tensor.");
  dim = normalize_dim(op, dim, in.size(), in);
  Shape want = in;
  want[dim] = index[0];
  if (source != want)
    fail(op, "source has shape ", source.str(), " but adding along dim ", dim, " of ", in.str(),
         " with ", index[0], " indices needs shape ", want.str(), ".");
}

Shape collective_shape(OpKind kind, const Shape& in, int64_t ranks) {
  if (kind != OpKind::ReduceScatter && kind != OpKind::AllGather) return in;
  const char* op = op_name(kind);
  if (in.size() == 0)
    fail(op,
         "needs a tensor with at least one dim (it splits or joins dim 0), got a 0-d one; "
         "reshape it to {1} first.");
  Shape out = in;
  if (kind == OpKind::AllGather) {
    out[0] = in[0] * ranks;
    return out;
  }
  if (in[0] % ranks != 0)
    fail(op, "dim 0 of shape ", in.str(), " does not split evenly over ", ranks,
         " ranks; pad it to a multiple of ", ranks, ".");
  out[0] = in[0] / ranks;
  return out;
}

}  // namespace lazytrace::ir
