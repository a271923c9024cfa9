#include "backends/cpu/views.h"

namespace lazytrace::cpu {

bool View::is_contiguous() const {
  if (is_scalar()) return false;
  int64_t expect = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

bool View::is_single_value() const {
  if (is_scalar()) return true;
  for (int64_t s : strides)
    if (s != 0) return false;
  return true;
}

View contiguous_view(int storage, DType dtype, const Shape& shape) {
  View v;
  v.storage = storage;
  v.dtype = dtype;
  v.shape = shape;
  v.strides = contiguous_strides(shape);
  return v;
}

View broadcast_view(const View& v, const Shape& target) {
  View out = v;
  out.shape = target;
  out.strides.assign(target.size(), 0);
  int off = target.size() - v.shape.size();
  for (int i = 0; i < v.shape.size(); ++i)
    out.strides[off + i] = (v.shape[i] == 1 && target[off + i] != 1) ? 0 : v.strides[i];
  return out;
}

View permute_view(const View& v, const int64_t* perm) {
  View out = v;
  for (int i = 0; i < v.shape.size(); ++i) {
    out.shape[i] = v.shape[static_cast<int>(perm[i])];
    out.strides[i] = v.strides[perm[i]];
  }
  return out;
}

View slice_view(const View& v, int dim, int64_t start, int64_t step, int64_t size) {
  View out = v;
  out.offset += start * v.strides[dim];
  out.strides[dim] *= step;
  out.shape[dim] = size;
  return out;
}

std::optional<View> reshape_view(const View& v, const Shape& target) {
  View out = v;
  out.shape = target;
  if (v.is_scalar()) {
    out.strides.assign(target.size(), 0);
    return out;
  }
  if (target.numel() == 0) {
    out.strides = contiguous_strides(target);
    return out;
  }
  // Group the old dims into runs that are contiguous among themselves (size-1 dims
  // dropped), then lay the new dims over those runs; each new dim must fit in one run.
  std::vector<int64_t> od, os;
  for (int i = 0; i < v.shape.size(); ++i)
    if (v.shape[i] != 1) {
      od.push_back(v.shape[i]);
      os.push_back(v.strides[i]);
    }
  out.strides.assign(target.size(), 0);
  int ti = 0, nt = target.size();
  size_t oi = 0;
  while (oi < od.size()) {
    // one run of old dims [oi, oj)
    size_t oj = oi + 1;
    int64_t run = od[oi];
    while (oj < od.size() && os[oj - 1] == os[oj] * od[oj]) run *= od[oj++];
    int64_t inner_stride = os[oj - 1];
    // new dims covering this run, outermost first
    int64_t acc = 1;
    int tj = ti;
    while (tj < nt && acc < run) acc *= target[tj++];
    while (tj < nt && target[tj] == 1) ++tj;
    if (acc != run) return std::nullopt;
    int64_t st = inner_stride;
    for (int k = tj - 1; k >= ti; --k) {
      out.strides[k] = st;
      st *= target[k];
    }
    ti = tj;
    oi = oj;
  }
  for (; ti < nt; ++ti) {
    if (target[ti] != 1) return std::nullopt;
  }
  for (int k = 0; k < nt; ++k)
    if (target[k] == 1) out.strides[k] = 0;
  return out;
}

}  // namespace lazytrace::cpu
