// One table-driven harness for every public op (as ggml's test-backend-ops): each row names
// an op, its inputs (shape, dtype, value range, memory layout) and a reference written as a
// plain C++ loop over doubles. The reference never calls lazytrace; lazytrace only builds
// the inputs and rounds float16/bfloat16 input values the way they are stored.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iomanip>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <lazytrace/core/half.h>
#include <lazytrace/lazytrace.h>
#include <map>
#include <set>

#include "op_coverage.h"

namespace {

using lt::DType;
using lt::Tensor;
using Dims = std::vector<int64_t>;
using Values = std::vector<double>;

constexpr DType f32 = DType::float32, f64 = DType::float64, f16 = DType::float16,
                bf16 = DType::bfloat16, i32 = DType::int32, i64 = DType::int64,
                boolean = DType::bool_;
const std::vector<DType> kFloatDTypes = {f32, f64, f16, bf16};
const std::vector<DType> kAllDTypes = {f32, f64, f16, bf16, i32, i64, boolean};

bool is_float(DType d) {
  return d == f32 || d == f64 || d == f16 || d == bf16;
}
bool is_int(DType d) {
  return d == i32 || d == i64;
}

const char* short_name(DType d) {
  switch (d) {
    case DType::float32:
      return "f32";
    case DType::float64:
      return "f64";
    case DType::float16:
      return "f16";
    case DType::bfloat16:
      return "bf16";
    case DType::int32:
      return "i32";
    case DType::int64:
      return "i64";
    case DType::bool_:
      return "bool";
  }
  return "?";
}

// ------------------------------------------------------------------------- tolerances

/**
 * |got - want| <= atol + rtol * |want|, by result dtype. The only place precision is decided;
 * a row may only scale it (Case::tol_scale).
 */
struct Tolerance {
  double rtol, atol;
};

Tolerance tolerance(DType result) {
  switch (result) {
    case DType::float32:
      return {1e-5, 1e-6};
    case DType::float64:
      return {1e-12, 1e-12};
    case DType::float16:  // 16-bit results are held to an ulp instead (within_an_ulp)
    case DType::bfloat16:
      return {1e-2, 1e-3};
    case DType::int32:  // integers and bool are exact
    case DType::int64:
    case DType::bool_:
      return {0, 0};
  }
  return {0, 0};
}

bool close(double got, double want, Tolerance tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= tol.atol + tol.rtol * std::fabs(want);
}

// ------------------------------------------------------------------- reference tensors

/** A host tensor for references: row-major values held as doubles. */
struct Ref {
  Dims shape;
  DType dtype = f32;
  Values v;
  int ndim() const { return static_cast<int>(shape.size()); }
};

int64_t numel_of(const Dims& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Dims unravel(int64_t flat, const Dims& shape) {
  Dims idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

int64_t ravel(const Dims& idx, const Dims& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

int norm_dim(int dim, int ndim) {
  return dim < 0 ? dim + ndim : dim;
}

std::string dims_str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(d[i]);
  }
  return s + "]";
}

/** NumPy broadcasting of two shapes (right-aligned; sizes equal or 1). */
Dims broadcast_dims(const Dims& a, const Dims& b) {
  const size_t n = std::max(a.size(), b.size());
  Dims out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    const int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

/** r's element at an index of a broadcast result: right-aligned, size-1 dims repeat. */
double at_broadcast(const Ref& r, const Dims& out_idx) {
  const size_t off = out_idx.size() - r.shape.size();
  int64_t flat = 0;
  for (size_t d = 0; d < r.shape.size(); ++d)
    flat = flat * r.shape[d] + (r.shape[d] == 1 ? 0 : out_idx[off + d]);
  return r.v[static_cast<size_t>(flat)];
}

Ref map_n(const std::vector<const Ref*>& ins, DType out,
          const std::function<double(const Values&)>& f) {
  Dims shape;
  for (const Ref* r : ins) shape = broadcast_dims(shape, r->shape);
  Ref res{shape, out, Values(static_cast<size_t>(numel_of(shape)))};
  Values args(ins.size());
  for (size_t i = 0; i < res.v.size(); ++i) {
    const Dims idx = unravel(static_cast<int64_t>(i), shape);
    for (size_t k = 0; k < ins.size(); ++k) args[k] = at_broadcast(*ins[k], idx);
    res.v[i] = out == boolean ? double(f(args) != 0) : f(args);  // a bool result is x != 0
  }
  return res;
}

Ref map1(const Ref& a, DType out, const std::function<double(double)>& f) {
  return map_n({&a}, out, [&](const Values& x) { return f(x[0]); });
}

Ref map2(const Ref& a, const Ref& b, DType out, const std::function<double(double, double)>& f) {
  return map_n({&a, &b}, out, [&](const Values& x) { return f(x[0], x[1]); });
}

Ref constant(const Dims& shape, DType dtype, double value) {
  return {shape, dtype, Values(static_cast<size_t>(numel_of(shape)), value)};
}

enum class Red { Sum, Mean, Amax };

/** Reduces x over dims (negative allowed), or over every dim when all is set. */
Ref reduce_ref(const Ref& x, Red kind, const std::vector<int>& dims, bool all, bool keepdim,
               DType out) {
  const int nd = x.ndim();
  std::vector<bool> reduced(static_cast<size_t>(nd), all);
  if (nd > 0)  // a 0-d tensor accepts dim 0 or -1 and reduces over nothing
    for (int d : dims) reduced[static_cast<size_t>(norm_dim(d, nd))] = true;
  Dims oshape;
  int64_t count = 1;
  for (int d = 0; d < nd; ++d) {
    if (!reduced[d]) oshape.push_back(x.shape[d]);
    if (reduced[d] && keepdim) oshape.push_back(1);
    if (reduced[d]) count *= x.shape[d];
  }
  const double init = kind == Red::Amax ? -std::numeric_limits<double>::infinity() : 0.0;
  Ref res = constant(oshape, out, init);
  for (size_t i = 0; i < x.v.size(); ++i) {
    const Dims idx = unravel(static_cast<int64_t>(i), x.shape);
    Dims oidx;
    for (int d = 0; d < nd; ++d) {
      if (!reduced[d]) oidx.push_back(idx[d]);
      if (reduced[d] && keepdim) oidx.push_back(0);
    }
    double& acc = res.v[static_cast<size_t>(ravel(oidx, oshape))];
    const double x_i = x.v[i];
    acc = kind != Red::Amax ? acc + x_i : (std::isnan(x_i) || x_i > acc) ? x_i : acc;
  }
  if (kind == Red::Mean)
    for (double& v : res.v) v /= static_cast<double>(count);
  return res;
}

Ref softmax_ref(const Ref& x, int dim, bool log) {
  dim = norm_dim(dim, x.ndim());
  const Ref m = reduce_ref(x, Red::Amax, {dim}, false, true, x.dtype);
  Ref s = constant(m.shape, x.dtype, 0);
  auto line = [&](size_t i) {
    Dims idx = unravel(static_cast<int64_t>(i), x.shape);
    idx[static_cast<size_t>(dim)] = 0;
    return static_cast<size_t>(ravel(idx, m.shape));
  };
  for (size_t i = 0; i < x.v.size(); ++i) s.v[line(i)] += std::exp(x.v[i] - m.v[line(i)]);
  Ref res{x.shape, x.dtype, Values(x.v.size())};
  for (size_t i = 0; i < x.v.size(); ++i) {
    const double shifted = x.v[i] - m.v[line(i)];
    res.v[i] = log ? shifted - std::log(s.v[line(i)]) : std::exp(shifted) / s.v[line(i)];
  }
  return res;
}

Ref reshape_ref(const Ref& x, Dims target) {
  int64_t known = 1;
  for (int64_t d : target) known *= d == -1 ? 1 : d;
  for (int64_t& d : target)
    if (d == -1) d = numel_of(x.shape) / known;
  return {target, x.dtype, x.v};
}

Ref permute_ref(const Ref& x, std::vector<int> perm) {
  Dims oshape;
  for (int& p : perm) {
    p = norm_dim(p, x.ndim());
    oshape.push_back(x.shape[static_cast<size_t>(p)]);
  }
  Ref res{oshape, x.dtype, Values(x.v.size())};
  for (size_t o = 0; o < res.v.size(); ++o) {
    const Dims oidx = unravel(static_cast<int64_t>(o), oshape);
    Dims iidx(oidx.size());
    for (size_t i = 0; i < perm.size(); ++i) iidx[static_cast<size_t>(perm[i])] = oidx[i];
    res.v[o] = x.v[static_cast<size_t>(ravel(iidx, x.shape))];
  }
  return res;
}

Ref transpose_ref(const Ref& x, int d0, int d1) {
  std::vector<int> perm(static_cast<size_t>(x.ndim()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(norm_dim(d0, x.ndim()))],
            perm[static_cast<size_t>(norm_dim(d1, x.ndim()))]);
  return permute_ref(x, perm);
}

Ref broadcast_ref(const Ref& x, const Dims& target) {
  Ref res = constant(target, x.dtype, 0);
  for (size_t o = 0; o < res.v.size(); ++o)
    res.v[o] = at_broadcast(x, unravel(static_cast<int64_t>(o), target));
  return res;
}

/** Python slicing semantics along one dim (start/stop clamp, negatives count from the end). */
Ref slice_ref(const Ref& x, int dim, int64_t start, int64_t stop, int64_t step) {
  dim = norm_dim(dim, x.ndim());
  const int64_t n = x.shape[static_cast<size_t>(dim)];
  if (start < 0) start += n;
  if (stop < 0) stop += n;
  start = std::clamp<int64_t>(start, 0, n);
  stop = std::clamp<int64_t>(stop, start, n);
  Dims oshape = x.shape;
  oshape[static_cast<size_t>(dim)] = (stop - start + step - 1) / step;
  Ref res = constant(oshape, x.dtype, 0);
  for (size_t o = 0; o < res.v.size(); ++o) {
    Dims idx = unravel(static_cast<int64_t>(o), oshape);
    idx[static_cast<size_t>(dim)] = start + idx[static_cast<size_t>(dim)] * step;
    res.v[o] = x.v[static_cast<size_t>(ravel(idx, x.shape))];
  }
  return res;
}

Ref select_ref(const Ref& x, int dim, int64_t index) {
  dim = norm_dim(dim, x.ndim());
  if (index < 0) index += x.shape[static_cast<size_t>(dim)];
  Dims oshape = x.shape;
  oshape.erase(oshape.begin() + dim);
  Ref res = constant(oshape, x.dtype, 0);
  for (size_t o = 0; o < res.v.size(); ++o) {
    Dims idx = unravel(static_cast<int64_t>(o), oshape);
    idx.insert(idx.begin() + dim, index);
    res.v[o] = x.v[static_cast<size_t>(ravel(idx, x.shape))];
  }
  return res;
}

Ref concat_ref(const std::vector<Ref>& xs, int dim, DType out) {
  dim = norm_dim(dim, xs[0].ndim());
  const auto d = static_cast<size_t>(dim);
  Dims oshape = xs[0].shape;
  oshape[d] = 0;
  for (const Ref& x : xs) oshape[d] += x.shape[d];
  Ref res = constant(oshape, out, 0);
  for (size_t o = 0; o < res.v.size(); ++o) {
    Dims idx = unravel(static_cast<int64_t>(o), oshape);
    size_t part = 0;
    while (idx[d] >= xs[part].shape[d]) idx[d] -= xs[part++].shape[d];
    res.v[o] = xs[part].v[static_cast<size_t>(ravel(idx, xs[part].shape))];
  }
  return res;
}

Ref stack_ref(const std::vector<Ref>& xs, int dim) {
  dim = norm_dim(dim, xs[0].ndim() + 1);
  Dims oshape = xs[0].shape;
  oshape.insert(oshape.begin() + dim, static_cast<int64_t>(xs.size()));
  Ref res = constant(oshape, xs[0].dtype, 0);
  for (size_t o = 0; o < res.v.size(); ++o) {
    Dims idx = unravel(static_cast<int64_t>(o), oshape);
    const auto part = static_cast<size_t>(idx[static_cast<size_t>(dim)]);
    idx.erase(idx.begin() + dim);
    res.v[o] = xs[part].v[static_cast<size_t>(ravel(idx, xs[part].shape))];
  }
  return res;
}

Ref index_select_ref(const Ref& x, int dim, const std::vector<int64_t>& index) {
  dim = norm_dim(dim, x.ndim());
  Dims oshape = x.shape;
  oshape[static_cast<size_t>(dim)] = static_cast<int64_t>(index.size());
  Ref res = constant(oshape, x.dtype, 0);
  for (size_t o = 0; o < res.v.size(); ++o) {
    Dims idx = unravel(static_cast<int64_t>(o), oshape);
    idx[static_cast<size_t>(dim)] = index[static_cast<size_t>(idx[static_cast<size_t>(dim)])];
    res.v[o] = x.v[static_cast<size_t>(ravel(idx, x.shape))];
  }
  return res;
}

Ref index_add_ref(const Ref& x, int dim, const std::vector<int64_t>& index, const Ref& src) {
  dim = norm_dim(dim, x.ndim());
  Ref res = x;
  for (size_t o = 0; o < src.v.size(); ++o) {
    Dims idx = unravel(static_cast<int64_t>(o), src.shape);
    idx[static_cast<size_t>(dim)] = index[static_cast<size_t>(idx[static_cast<size_t>(dim)])];
    res.v[static_cast<size_t>(ravel(idx, x.shape))] += src.v[o];
  }
  return res;
}

/** NumPy matmul: a 1-d lhs is [1, k], a 1-d rhs is [k, 1] (dropped again); batches broadcast. */
Ref matmul_ref(const Ref& a, const Ref& b, DType out) {
  Ref A = a, B = b;
  if (a.ndim() == 1) A.shape.insert(A.shape.begin(), 1);
  if (b.ndim() == 1) B.shape.push_back(1);
  const int64_t m = A.shape[A.shape.size() - 2], k = A.shape.back(), n = B.shape.back();
  Dims batch = broadcast_dims(Dims(A.shape.begin(), A.shape.end() - 2),
                              Dims(B.shape.begin(), B.shape.end() - 2));
  Dims full = batch;
  full.push_back(m);
  full.push_back(n);
  Ref res = constant(full, out, 0);
  for (size_t o = 0; o < res.v.size(); ++o) {
    const Dims idx = unravel(static_cast<int64_t>(o), full);
    Dims ia = idx, ib = idx;
    double acc = 0;
    for (int64_t q = 0; q < k; ++q) {
      ia.back() = q;          // [batch..., i, q]
      ib[ib.size() - 2] = q;  // [batch..., q, j]
      acc += at_broadcast(A, ia) * at_broadcast(B, ib);
    }
    res.v[o] = acc;
  }
  if (b.ndim() == 1) res.shape.pop_back();
  if (a.ndim() == 1) res.shape.erase(res.shape.end() - 1 - (b.ndim() == 1 ? 0 : 1));
  return res;
}

/** x rounded to `bits` significant bits, ties to even (normal range only): f16 11, bf16 8. */
double round_significand(double x, int bits) {
  int e = 0;
  const double m = std::frexp(x, &e);  // x = m * 2^e, 0.5 <= |m| < 1
  const double scale = std::ldexp(1.0, bits);
  return std::ldexp(std::nearbyint(m * scale) / scale, e);
}

// ----------------------------------------------------------------------------- inputs

/** How the input tensor lies in memory; the op sees the same logical values either way. */
enum class Layout {
  Contiguous,
  Transposed,  // lt::transpose of a buffer with the last two dims swapped
  Strided,     // lt::slice(buffer, 0, 1, ..., 2): every other row, starting at offset 1
  Pending,     // lt::maximum(buffer, buffer): not yet computed, so the op fuses with it
};

struct Input {
  Dims shape;
  DType dtype = f32;
  double lo = -2, hi = 2;  // values uniform in [lo, hi); integers in [ceil(lo), floor(hi)]
  bool whole = false;      // integer values even for float dtypes (exact ties for comparisons)
  Layout layout = Layout::Contiguous;
  Values fixed;  // when set: exactly these values, cycled (NaN, infinities, -0.0, extremes)
};

Input in(Dims shape, DType dtype, double lo = -2, double hi = 2) {
  Input i;
  i.shape = std::move(shape);
  i.dtype = dtype;
  i.lo = lo;
  i.hi = hi;
  return i;
}
Input fixed(Dims shape, DType dtype, Values values) {
  Input i = in(std::move(shape), dtype);
  i.fixed = std::move(values);
  return i;
}
Input transposed(Input i) {
  i.layout = Layout::Transposed;
  return i;
}
Input strided(Input i) {
  i.layout = Layout::Strided;
  return i;
}
Input pending(Input i) {
  i.layout = Layout::Pending;
  return i;
}
Input whole(Input i) {
  i.whole = true;
  return i;
}

std::string describe(const Input& i) {
  std::string s = short_name(i.dtype) + dims_str(i.shape);
  if (!i.fixed.empty()) s += "(special)";
  if (i.layout == Layout::Transposed) s += "T";
  if (i.layout == Layout::Strided) s += "S";
  if (i.layout == Layout::Pending) s += "P";
  return s;
}

/** A 64-bit LCG (Knuth's MMIX constants): deterministic inputs on every platform. */
class Lcg {
 public:
  explicit Lcg(uint64_t seed) : s_(seed) { next(); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t next() { return s_ = s_ * 6364136223846793005ULL + 1442695040888963407ULL; }
  uint64_t s_;
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

Values random_values(const Input& in, uint64_t seed) {
  Lcg rng(seed);
  Values v(static_cast<size_t>(numel_of(in.shape)));
  if (!in.fixed.empty()) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = in.fixed[i % in.fixed.size()];
    return v;
  }
  const double ilo = std::ceil(in.lo), ihi = std::floor(in.hi);
  for (double& x : v) {
    const double u = rng.uniform();
    if (in.dtype == boolean)
      x = u < 0.5 ? 0 : 1;
    else if (is_int(in.dtype) || in.whole)
      x = std::min(ihi, std::floor(ilo + u * (ihi - ilo + 1)));
    else
      x = in.lo + u * (in.hi - in.lo);
  }
  return v;
}

/** The values as the dtype stores them (f16/bf16 rounded by lazytrace's own cast). */
Values stored_values(const Values& v, DType d) {
  if (d == f32) {
    Values r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = static_cast<float>(v[i]);
    return r;
  }
  if (d == f16 || d == bf16) {
    std::vector<float> f(v.begin(), v.end());
    return lt::astype(lt::tensor(f, lt::Shape{static_cast<int64_t>(f.size())}), d)
        .to_vector<double>();
  }
  return v;
}

/** A materialized tensor holding exactly these values. */
Tensor device_tensor(const Values& v, const Dims& shape, DType d) {
  const lt::Shape s(shape);
  switch (d) {
    case DType::float32:
      return lt::tensor(std::vector<float>(v.begin(), v.end()), s);
    case DType::float64:
      return lt::tensor(v, s);
    case DType::float16:
    case DType::bfloat16: {
      Tensor t = lt::astype(lt::tensor(std::vector<float>(v.begin(), v.end()), s), d);
      lt::sync({t});
      return t;
    }
    case DType::int32:
      return lt::tensor(std::vector<int32_t>(v.begin(), v.end()), s);
    case DType::int64:
      return lt::tensor(std::vector<int64_t>(v.begin(), v.end()), s);
    case DType::bool_: {
      std::vector<bool> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = v[i] != 0;
      return lt::tensor(b, s);
    }
  }
  return {};
}

struct Prepared {
  Tensor t;
  Ref ref;
};

Prepared prepare(const Input& in, uint64_t seed) {
  Ref ref{in.shape, in.dtype, stored_values(random_values(in, seed), in.dtype)};
  const size_t nd = in.shape.size();
  switch (in.layout) {
    case Layout::Contiguous:
      return {device_tensor(ref.v, in.shape, in.dtype), ref};
    case Layout::Pending: {
      Tensor t = device_tensor(ref.v, in.shape, in.dtype);
      return {lt::maximum(t, t), ref};
    }
    case Layout::Transposed: {
      Dims storage = in.shape;
      std::swap(storage[nd - 2], storage[nd - 1]);
      Values sv(ref.v.size());
      for (size_t i = 0; i < ref.v.size(); ++i) {
        Dims idx = unravel(static_cast<int64_t>(i), in.shape);
        std::swap(idx[nd - 2], idx[nd - 1]);
        sv[static_cast<size_t>(ravel(idx, storage))] = ref.v[i];
      }
      return {lt::transpose(device_tensor(sv, storage, in.dtype), -2, -1), ref};
    }
    case Layout::Strided: {
      Dims storage = in.shape;
      storage[0] = 2 * storage[0] + 1;
      const double filler = in.dtype == boolean ? 0 : std::ceil(in.lo);
      Values sv(static_cast<size_t>(numel_of(storage)), filler);
      for (size_t i = 0; i < ref.v.size(); ++i) {
        Dims idx = unravel(static_cast<int64_t>(i), in.shape);
        idx[0] = 2 * idx[0] + 1;
        sv[static_cast<size_t>(ravel(idx, storage))] = ref.v[i];
      }
      return {lt::slice(device_tensor(sv, storage, in.dtype), 0, 1, storage[0], 2), ref};
    }
  }
  return {};
}

// -------------------------------------------------------------------------- the table

using Ts = std::vector<Tensor>;
using Rs = std::vector<Ref>;

struct Case {
  std::string name;  // op, then the inputs, e.g. "exp f16[5,7]T"
  std::vector<Input> inputs;
  std::function<Tensor(const Ts&)> op;
  std::function<Ref(const Rs&)> ref;
  double tol_scale = 1;  // multiplies tolerance(): long dot products; 0 demands exact values
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

std::string with_inputs(const std::string& name, const std::vector<Input>& inputs) {
  std::string s = name;
  for (const Input& i : inputs) {
    s += ' ';
    s += describe(i);
  }
  return s;
}

Case make_case(const std::string& name, std::vector<Input> inputs,
               std::function<Tensor(const Ts&)> op, std::function<Ref(const Rs&)> ref,
               double tol_scale = 1) {
  std::string full = with_inputs(name, inputs);
  return {full, std::move(inputs), std::move(op), std::move(ref), tol_scale};
}

struct Built {
  Tensor got;
  Ref want;
};

/** Records the row's op on fresh inputs; `salt` draws different input values. */
Built build(const Case& c, uint64_t salt = 0) {
  Ts ts;
  Rs rs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    Prepared p = prepare(c.inputs[i], fnv1a(c.name) + i + salt * 0x9E3779B97F4A7C15ULL);
    ts.push_back(p.t);
    rs.push_back(p.ref);
  }
  return {c.op(ts), c.ref(rs)};
}

/**
 * A 16-bit result (computed in float32, rounded once) against the double reference rounded
 * to the dtype: at most 1 ulp apart, plus float32's own error (scaled like float32's
 * tolerance; far below an ulp, it only matters next to 0 and where sums cancel).
 */
bool within_an_ulp(double got, double want, DType d, double tol_scale) {
  if (std::isnan(want) || std::isinf(want) || tol_scale == 0) return close(got, want, {0, 0});
  const int bits = d == f16 ? 11 : 8;
  const double rounded = round_significand(want, bits);
  int e = 0;
  std::frexp(rounded, &e);
  const double ulp = rounded == 0 ? 0 : std::ldexp(1.0, e - bits);
  const Tolerance f32 = tolerance(DType::float32);
  return std::fabs(got - rounded) <= ulp + tol_scale * (f32.atol + f32.rtol * std::fabs(want));
}

void expect_matches(const Tensor& got, const Ref& want, double tol_scale) {
  ASSERT_EQ(short_name(got.dtype()), std::string(short_name(want.dtype))) << "result dtype";
  ASSERT_EQ(got.shape().vec(), want.shape) << "result shape";
  const Values g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.v.size());
  Tolerance tol = tolerance(want.dtype);
  tol.rtol *= tol_scale;
  tol.atol *= tol_scale;
  const bool half = want.dtype == f16 || want.dtype == bf16;
  size_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (half ? within_an_ulp(g[i], want.v[i], want.dtype, tol_scale) : close(g[i], want.v[i], tol))
      continue;
    if (++bad <= 5)
      ADD_FAILURE() << "element " << dims_str(unravel(static_cast<int64_t>(i), want.shape))
                    << ": got " << std::setprecision(10) << g[i] << ", want " << want.v[i];
  }
  EXPECT_EQ(bad, 0u) << bad << " of " << g.size() << " elements differ";
}

class OpsTest : public ::testing::TestWithParam<Case> {};

TEST_P(OpsTest, MatchesReference) {
  const Case& c = GetParam();
  SCOPED_TRACE(c.name);
  Built b = build(c);
  expect_matches(b.got, b.want, c.tol_scale);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = std::to_string(info.index) + "_";
  for (char ch : info.param.name) {
    const bool alnum = std::isalnum(static_cast<unsigned char>(ch)) != 0;
    if (alnum)
      s += ch;
    else if (s.back() != '_')
      s += '_';
  }
  while (s.back() == '_') s.pop_back();
  return s;
}

// ------------------------------------------------------------------------- unary ops

std::vector<Case> unary_cases() {
  // Float: integer and bool inputs compute in float32. Signed: keeps the dtype, rejects bool.
  enum Domain { Float, Signed };
  struct Row {
    const char* name;
    Tensor (*op)(const Tensor&);
    double (*ref)(double);
    double lo, hi;
    Domain domain;
  };
  const Row rows[] = {
      {"neg", lt::neg, [](double x) { return -x; }, -3, 3, Signed},
      {"unary-", [](const Tensor& t) { return -t; }, [](double x) { return -x; }, -3, 3, Signed},
      {"exp", lt::exp, [](double x) { return std::exp(x); }, -3, 3, Float},
      {"log", lt::log, [](double x) { return std::log(x); }, 0.1, 6, Float},
      {"log1p", lt::log1p, [](double x) { return std::log1p(x); }, -0.9, 6, Float},
      {"sin", lt::sin, [](double x) { return std::sin(x); }, -3, 3, Float},
      {"cos", lt::cos, [](double x) { return std::cos(x); }, -3, 3, Float},
      {"tanh", lt::tanh, [](double x) { return std::tanh(x); }, -3, 3, Float},
      {"sigmoid", lt::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -6, 6, Float},
      {"relu", lt::relu, [](double x) { return std::isnan(x) || x > 0 ? x : 0; }, -3, 3, Signed},
      {"gelu", lt::gelu, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -4,
       4, Float},
      {"silu", lt::silu, [](double x) { return x / (1 + std::exp(-x)); }, -5, 5, Float},
      {"sqrt", lt::sqrt, [](double x) { return std::sqrt(x); }, 0, 9, Float},
      {"rsqrt", lt::rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.1, 9, Float},
      {"abs", lt::abs, [](double x) { return std::fabs(x); }, -3, 3, Signed},
      {"erf", lt::erf, [](double x) { return std::erf(x); }, -3, 3, Float},
  };
  std::vector<Case> cases;
  for (const Row& r : rows) {
    for (DType d : kAllDTypes) {
      if (d == boolean && r.domain == Signed) continue;  // rejected: see OpsErrors
      const DType out = is_float(d) || r.domain == Signed ? d : f32;
      std::vector<Input> shapes = {in({2, 3, 4}, d, r.lo, r.hi),
                                   transposed(in({5, 7}, d, r.lo, r.hi)),
                                   pending(in({4, 5}, d, r.lo, r.hi))};
      if (d == f32 || d == f16 || d == i32) shapes.push_back(strided(in({3, 5}, d, r.lo, r.hi)));
      if (d == f32 || d == i64) shapes.push_back(in({}, d, r.lo, r.hi));
      for (const Input& x : shapes)
        cases.push_back(make_case(
            r.name, {x}, [op = r.op](const Ts& t) { return op(t[0]); },
            [f = r.ref, out](const Rs& x) { return map1(x[0], out, f); }));
    }
  }
  return cases;
}

// ------------------------------------------------------------------------ binary ops

enum class BinKind { Arith, Sub, Div, Pow, MinMax, Compare, Angle, Floor };

/** PyTorch's result dtype for two tensors of the same dtype. */
DType same_dtype_result(BinKind k, DType d) {
  if (k == BinKind::Compare) return boolean;
  if (k == BinKind::Div || k == BinKind::Angle) return is_float(d) ? d : f32;
  if (d == boolean && k != BinKind::MinMax && k != BinKind::Arith) return i64;
  return d;
}

// maximum and minimum propagate NaN, as in PyTorch
double maximum_ref(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN() : std::max(a, b);
}
double minimum_ref(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN() : std::min(a, b);
}

// Python's // and % on doubles (CPython's float_floor_div and float_rem)
double floor_divide_ref(double a, double b) {
  if (b == 0) return a / b;  // IEEE's infinity or NaN, as PyTorch
  const double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
  if (div == 0) return std::copysign(0.0, a / b);
  double f = std::floor(div);
  if (div - f > 0.5) f += 1;
  return f;
}
double remainder_ref(double a, double b) {
  double mod = std::fmod(a, b);
  if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;
  return mod == 0 ? std::copysign(0.0, b) : mod;
}

struct BinRow {
  const char* name;
  Tensor (*op)(const Tensor&, const Tensor&);
  double (*ref)(double, double);
  BinKind kind;
};

const std::vector<BinRow>& binary_rows() {
  static const std::vector<BinRow> rows = {
      {"add", lt::add, [](double a, double b) { return a + b; }, BinKind::Arith},
      {"sub", lt::sub, [](double a, double b) { return a - b; }, BinKind::Sub},
      {"mul", lt::mul, [](double a, double b) { return a * b; }, BinKind::Arith},
      {"div", lt::div, [](double a, double b) { return a / b; }, BinKind::Div},
      {"pow", lt::pow, [](double a, double b) { return std::pow(a, b); }, BinKind::Pow},
      {"maximum", lt::maximum, maximum_ref, BinKind::MinMax},
      {"minimum", lt::minimum, minimum_ref, BinKind::MinMax},
      {"atan2", lt::atan2, [](double a, double b) { return std::atan2(a, b); }, BinKind::Angle},
      {"floor_divide", lt::floor_divide, floor_divide_ref, BinKind::Floor},
      {"remainder", lt::remainder, remainder_ref, BinKind::Floor},
      {"eq", lt::eq, [](double a, double b) { return double(a == b); }, BinKind::Compare},
      {"ne", lt::ne, [](double a, double b) { return double(a != b); }, BinKind::Compare},
      {"lt", lt::lt, [](double a, double b) { return double(a < b); }, BinKind::Compare},
      {"le", lt::le, [](double a, double b) { return double(a <= b); }, BinKind::Compare},
      {"gt", lt::gt, [](double a, double b) { return double(a > b); }, BinKind::Compare},
      {"ge", lt::ge, [](double a, double b) { return double(a >= b); }, BinKind::Compare},
      {"op+", [](const Tensor& a, const Tensor& b) { return a + b; },
       [](double a, double b) { return a + b; }, BinKind::Arith},
      {"op-", [](const Tensor& a, const Tensor& b) { return a - b; },
       [](double a, double b) { return a - b; }, BinKind::Sub},
      {"op*", [](const Tensor& a, const Tensor& b) { return a * b; },
       [](double a, double b) { return a * b; }, BinKind::Arith},
      {"op/", [](const Tensor& a, const Tensor& b) { return a / b; },
       [](double a, double b) { return a / b; }, BinKind::Div},
      {"op==", [](const Tensor& a, const Tensor& b) { return a == b; },
       [](double a, double b) { return double(a == b); }, BinKind::Compare},
      {"op!=", [](const Tensor& a, const Tensor& b) { return a != b; },
       [](double a, double b) { return double(a != b); }, BinKind::Compare},
      {"op<", [](const Tensor& a, const Tensor& b) { return a < b; },
       [](double a, double b) { return double(a < b); }, BinKind::Compare},
      {"op<=", [](const Tensor& a, const Tensor& b) { return a <= b; },
       [](double a, double b) { return double(a <= b); }, BinKind::Compare},
      {"op>", [](const Tensor& a, const Tensor& b) { return a > b; },
       [](double a, double b) { return double(a > b); }, BinKind::Compare},
      {"op>=", [](const Tensor& a, const Tensor& b) { return a >= b; },
       [](double a, double b) { return double(a >= b); }, BinKind::Compare},
  };
  return rows;
}

/** Operand value ranges that keep the op well defined (and give ties for comparisons). */
std::pair<Input, Input> binary_ranges(BinKind k, Input a, Input b) {
  auto range = [](Input& i, double lo, double hi) {
    i.lo = lo;
    i.hi = hi;
  };
  switch (k) {
    case BinKind::Div:
      range(a, -3, 3), range(b, 0.5, 3);
      break;
    case BinKind::Floor:  // divisors away from 0 (integers: 1 to 3), dividends of both signs
      range(a, -7, 7), range(b, 1, 3);
      break;
    case BinKind::Pow:
      if (is_int(a.dtype))
        range(a, 0, 4), range(b, 0, 3);  // negative integer exponents are an error in PyTorch
      else
        range(a, 0.5, 2.5), range(b, -2, 2);
      break;
    case BinKind::Compare:
      a = whole(a), b = whole(b);
      break;
    case BinKind::Arith:
    case BinKind::Sub:
    case BinKind::MinMax:
    case BinKind::Angle:
      range(a, -3, 3), range(b, -3, 3);
      break;
  }
  return {a, b};
}

std::vector<Case> binary_cases() {
  // (a, b) shape pairs: same shape, broadcasting, 0-d, and non-contiguous operands
  const std::vector<std::pair<Input, Input>> shapes = {
      {in({3, 4}, f32), in({3, 4}, f32)},
      {in({2, 3}, f32), in({3}, f32)},
      {in({2, 1, 4}, f32), in({3, 1}, f32)},
      {in({}, f32), in({2, 3}, f32)},
      {transposed(in({4, 3}, f32)), in({4, 3}, f32)},
      {in({3, 4}, f32), strided(in({3, 4}, f32))},
      {pending(in({2, 3}, f32)), in({3}, f32)},
      {transposed(in({4, 3}, f32)), pending(in({4, 1}, f32))},
  };
  std::vector<Case> cases;
  for (const BinRow& r : binary_rows()) {
    const bool operator_form = r.name[0] == 'o';
    for (DType d : kAllDTypes) {
      if (d == boolean &&
          (r.kind == BinKind::Sub || r.kind == BinKind::Pow || r.kind == BinKind::Floor))
        continue;
      const DType out = same_dtype_result(r.kind, d);
      for (size_t s = 0; s < shapes.size(); ++s) {
        if (operator_form && s != 1 && s != 4 && s != 6)
          continue;  // the function form covers the rest
        Input a = shapes[s].first, b = shapes[s].second;
        a.dtype = b.dtype = d;
        auto [ra, rb] = binary_ranges(r.kind, a, b);
        cases.push_back(make_case(
            r.name, {ra, rb}, [op = r.op](const Ts& t) { return op(t[0], t[1]); },
            [f = r.ref, out](const Rs& x) { return map2(x[0], x[1], out, f); }));
      }
    }
  }
  return cases;
}

// A tensor against a plain number, on either side.
std::vector<Case> scalar_operand_cases() {
  struct Row {
    const char* name;
    BinKind kind;
    double (*ref)(double, double);
    Tensor (*left)(const Tensor&, lt::Scalar);   // t OP s
    Tensor (*right)(lt::Scalar, const Tensor&);  // s OP t
  };
#define LT_ROW(NAME, KIND, EXPR)                                              \
  Row {                                                                       \
    NAME, KIND, [](double a, double b) { return static_cast<double>(EXPR); }, \
        [](const Tensor& a, lt::Scalar b) { return EXPR; },                   \
        [](lt::Scalar a, const Tensor& b) { return EXPR; }                    \
  }
  const Row rows[] = {
      LT_ROW("+", BinKind::Arith, a + b),     LT_ROW("-", BinKind::Sub, a - b),
      LT_ROW("*", BinKind::Arith, a * b),     LT_ROW("/", BinKind::Div, a / b),
      LT_ROW("==", BinKind::Compare, a == b), LT_ROW("!=", BinKind::Compare, a != b),
      LT_ROW("<", BinKind::Compare, a < b),   LT_ROW("<=", BinKind::Compare, a <= b),
      LT_ROW(">", BinKind::Compare, a > b),   LT_ROW(">=", BinKind::Compare, a >= b),
  };
#undef LT_ROW
  // The scalar's kind (int 2, float 1.5) decides the result dtype as in torch.result_type:
  // a plain int keeps the tensor's dtype (bool becomes int64), a plain float keeps a
  // floating dtype and turns integers and bool into float32.
  auto result = [](BinKind k, DType t, bool float_scalar) {
    DType common = float_scalar ? (is_float(t) ? t : f32) : (t == boolean ? i64 : t);
    if (k == BinKind::Compare) return boolean;
    if (k == BinKind::Div && !is_float(common)) return f32;
    return common;
  };
  std::vector<Case> cases;
  for (const Row& r : rows) {
    for (DType d : kAllDTypes) {
      for (const double s : {2.0, 1.5}) {
        const bool float_scalar = s != 2.0;
        const DType out = result(r.kind, d, float_scalar);
        Input x = in({2, 3}, d, -3, 3);
        if (r.kind == BinKind::Compare) x = whole(x);
        Input denom = in({2, 3}, d, 0.5, 3);
        if (d == boolean) denom.lo = denom.hi = 1;  // all true
        const std::string sv = float_scalar ? "1.5" : "2";
        auto sc = [float_scalar]() { return float_scalar ? lt::Scalar(1.5) : lt::Scalar(2); };
        cases.push_back(make_case(
            std::string("t") + r.name + sv, {x},
            [op = r.left, sc](const Ts& t) { return op(t[0], sc()); },
            [f = r.ref, out, s](const Rs& x) {
              return map1(x[0], out, [&](double a) { return f(a, s); });
            }));
        cases.push_back(make_case(
            sv + r.name + "t", {r.kind == BinKind::Div ? denom : x},
            [op = r.right, sc](const Ts& t) { return op(sc(), t[0]); },
            [f = r.ref, out, s](const Rs& x) {
              return map1(x[0], out, [&](double b) { return f(s, b); });
            }));
      }
    }
  }
  // pow with a scalar exponent or base
  for (DType d : {f32, f64, f16, bf16, i32, i64}) {
    const bool fl = is_float(d);
    cases.push_back(make_case(
        "pow(t,2)", {in({2, 3}, d, -3, 3)}, [](const Ts& t) { return lt::pow(t[0], 2); },
        [d](const Rs& x) { return map1(x[0], d, [](double a) { return a * a; }); }));
    cases.push_back(make_case(
        "pow(t,0.5)", {in({2, 3}, d, 0, 9)}, [](const Ts& t) { return lt::pow(t[0], 0.5); },
        [out = fl ? d : f32](const Rs& x) {
          return map1(x[0], out, [](double a) { return std::sqrt(a); });
        }));
    cases.push_back(make_case(
        "pow(2,t)", {in({2, 3}, d, fl ? -2 : 0, fl ? 3 : 5)},
        [](const Ts& t) { return lt::pow(2, t[0]); },
        [d](const Rs& x) { return map1(x[0], d, [](double b) { return std::pow(2.0, b); }); }));
  }
  return cases;
}

// Result dtypes as torch.result_type gives them, spelled out case by case.
std::vector<Case> promotion_cases() {
  std::vector<Case> cases;
  auto both = [&](const char* name, Input a, Input b, Tensor (*op)(const Tensor&, const Tensor&),
                  double (*f)(double, double), DType want) {
    cases.push_back(make_case(
        std::string(name) + "->" + short_name(want), {a, b},
        [op](const Ts& t) { return op(t[0], t[1]); },
        [f, want](const Rs& x) { return map2(x[0], x[1], want, f); }));
  };
  auto add = [](const Tensor& a, const Tensor& b) { return a + b; };
  auto mul = [](const Tensor& a, const Tensor& b) { return a * b; };
  auto dv = [](const Tensor& a, const Tensor& b) { return a / b; };
  auto less = [](const Tensor& a, const Tensor& b) { return a < b; };
  auto equal = [](const Tensor& a, const Tensor& b) { return a == b; };
  auto fadd = [](double a, double b) { return a + b; };
  auto fmul = [](double a, double b) { return a * b; };
  auto fdiv = [](double a, double b) { return a / b; };
  auto fless = [](double a, double b) { return double(a < b); };
  auto fequal = [](double a, double b) { return double(a == b); };

  both("i32+f32", in({2, 3}, i32), in({2, 3}, f32), add, fadd, f32);
  both("f32+f64", in({2, 3}, f32), in({2, 3}, f64), add, fadd, f64);
  both("i32+i64", in({2, 3}, i32), in({2, 3}, i64), add, fadd, i64);
  // as in PyTorch, bool + bool and bool * bool stay bool (or, and); bool with a number is int64
  both("bool+bool", in({2, 3}, boolean), in({2, 3}, boolean), add, fadd, boolean);
  both("i32+f16", in({2, 3}, i32), in({2, 3}, f16), add, fadd, f16);
  both("bool*bf16", in({2, 3}, boolean), in({2, 3}, bf16), mul, fmul, bf16);
  both("f16+bf16", in({2, 3}, f16), in({2, 3}, bf16), add, fadd, f32);
  both("f16*f32", in({2, 3}, f16), in({3}, f32), mul, fmul, f32);
  both("i64*f64", in({3}, i64), in({2, 3}, f64), mul, fmul, f64);
  both("i32/i32", in({2, 3}, i32, -5, 5), in({2, 3}, i32, 1, 4), dv, fdiv, f32);
  both("i64/i64", in({2, 3}, i64, -5, 5), in({2, 3}, i64, 1, 4), dv, fdiv, f32);
  both("bool/f16", in({2, 3}, boolean), in({2, 3}, f16, 0.5, 2), dv, fdiv, f16);
  both("i32<f32", whole(in({2, 3}, i32)), whole(in({2, 3}, f32)), less, fless, boolean);
  both("f16==f64", whole(in({2, 3}, f16)), whole(in({3}, f64)), equal, fequal, boolean);
  both("bool<i32", in({2, 3}, boolean), in({2, 3}, i32, -1, 2), less, fless, boolean);
  // a 0-d tensor ranks below a tensor with dims, unless it brings a higher category
  both("f32[3]+0d_f64", in({3}, f32), in({}, f64), add, fadd, f32);
  both("i32[3]+0d_i64", in({3}, i32), in({}, i64), add, fadd, i32);
  both("i32[3]+0d_f64", in({3}, i32), in({}, f64), add, fadd, f64);
  // the 0-d float32 operand is cast to the result's float16 first, as in PyTorch
  cases.push_back(make_case(
      "f16[3]+0d_f32->f16", {in({3}, f16), in({}, f32)}, [](const Ts& t) { return t[0] + t[1]; },
      [](const Rs& x) {
        Ref b = x[1];
        b.v = stored_values(b.v, f16);
        return map2(x[0], b, f16, [](double u, double v) { return u + v; });
      }));
  both("0d_i64+0d_f64", in({}, i64), in({}, f64), add, fadd, f64);
  both("0d_f64+bool[3]", in({}, f64), in({3}, boolean), add, fadd, f64);

  auto scalar = [&](const char* name, Input a, std::function<Tensor(const Tensor&)> op,
                    std::function<double(double)> f, DType want) {
    cases.push_back(make_case(
        std::string(name) + "->" + short_name(want), {a}, [op](const Ts& t) { return op(t[0]); },
        [f, want](const Rs& x) { return map1(x[0], want, f); }));
  };
  scalar(
      "f32[3]+lt::scalar(1.0)", in({3}, f32), [](const Tensor& t) { return t + lt::scalar(1.0); },
      [](double a) { return a + 1; }, f32);
  scalar(
      "i32+2.5", in({2, 3}, i32), [](const Tensor& t) { return t + 2.5; },
      [](double a) { return a + 2.5; }, f32);
  scalar(
      "f16*2.0", in({2, 3}, f16), [](const Tensor& t) { return t * 2.0; },
      [](double a) { return a * 2; }, f16);
  scalar(
      "bf16-0.5", in({2, 3}, bf16), [](const Tensor& t) { return t - 0.5; },
      [](double a) { return a - 0.5; }, bf16);
  scalar(
      "bool+1", in({2, 3}, boolean), [](const Tensor& t) { return t + 1; },
      [](double a) { return a + 1; }, i64);
  scalar(
      "i32+1", in({2, 3}, i32), [](const Tensor& t) { return t + 1; },
      [](double a) { return a + 1; }, i32);
  scalar(
      "3*i32", in({2, 3}, i32), [](const Tensor& t) { return 3 * t; },
      [](double a) { return 3 * a; }, i32);
  scalar(
      "i64-int64_t(7)", in({2, 3}, i64), [](const Tensor& t) { return t - int64_t{7}; },
      [](double a) { return a - 7; }, i64);
  scalar(
      "i32+true", in({2, 3}, i32), [](const Tensor& t) { return t + true; },
      [](double a) { return a + 1; }, i32);
  scalar(
      "f32*true", in({2, 3}, f32), [](const Tensor& t) { return t * true; },
      [](double a) { return a; }, f32);
  scalar(
      "i32/2", in({2, 3}, i32, -5, 5), [](const Tensor& t) { return t / 2; },
      [](double a) { return a / 2; }, f32);
  scalar(
      "i32<2.5", in({2, 3}, i32, -5, 5), [](const Tensor& t) { return t < 2.5; },
      [](double a) { return double(a < 2.5); }, boolean);
  scalar(
      "f16==1", whole(in({2, 3}, f16)), [](const Tensor& t) { return t == 1; },
      [](double a) { return double(a == 1); }, boolean);
  scalar(
      "float(1.5f)+i64", in({2, 3}, i64), [](const Tensor& t) { return 1.5f + t; },
      [](double a) { return 1.5 + a; }, f32);
  scalar(
      "pow(i32,2)", in({2, 3}, i32, -3, 3), [](const Tensor& t) { return lt::pow(t, 2); },
      [](double a) { return a * a; }, i32);
  scalar(
      "pow(2.0,i32)", in({2, 3}, i32, -2, 3), [](const Tensor& t) { return lt::pow(2.0, t); },
      [](double b) { return std::pow(2, b); }, f32);
  scalar(
      "pow(f16,2)", in({2, 3}, f16, -3, 3), [](const Tensor& t) { return lt::pow(t, 2); },
      [](double a) { return a * a; }, f16);
  scalar(
      "maximum(i32,0d_f32)", in({2, 3}, i32, -3, 3),
      [](const Tensor& t) { return lt::maximum(t, lt::scalar(0.5, f32)); },
      [](double a) { return std::max(a, 0.5); }, f32);
  return cases;
}

// ------------------------------------------------------------------ where, astype, clone

std::vector<Case> where_cases() {
  std::vector<Case> cases;
  auto pick = [](double c, double a, double b) { return c != 0 ? a : b; };
  for (DType d : kAllDTypes) {
    // cond [2,1,4], a [3,1], b [4] broadcast to [2,3,4]
    cases.push_back(make_case(
        "where", {in({2, 1, 4}, boolean), in({3, 1}, d, -5, 5), in({4}, d, -5, 5)},
        [](const Ts& t) { return lt::where(t[0], t[1], t[2]); },
        [d, pick](const Rs& x) {
          return map_n({&x[0], &x[1], &x[2]}, d,
                       [&](const Values& v) { return pick(v[0], v[1], v[2]); });
        }));
    cases.push_back(make_case(
        "where", {transposed(in({3, 4}, boolean)), strided(in({3, 4}, d, -5, 5)), in({}, d, -5, 5)},
        [](const Ts& t) { return lt::where(t[0], t[1], t[2]); },
        [d, pick](const Rs& x) {
          return map_n({&x[0], &x[1], &x[2]}, d,
                       [&](const Values& v) { return pick(v[0], v[1], v[2]); });
        }));
  }
  // scalar branches: (tensor dtype, scalar, result dtype)
  struct ScalarRow {
    DType t;
    double s;
    bool float_scalar;
    DType want;
  };
  const ScalarRow rows[] = {
      {f32, 0.5, true, f32},  {f16, 0.5, true, f16},  {i32, 2.5, true, f32},
      {i64, 3, false, i64},   {i32, 3, false, i32},   {boolean, 3, false, i64},
      {bf16, 3, false, bf16}, {f64, -1.5, true, f64},
  };
  for (const ScalarRow& r : rows) {
    auto sc = [r]() { return r.float_scalar ? lt::Scalar(r.s) : lt::Scalar(int(r.s)); };
    const std::string sv = std::to_string(r.s).substr(0, 4);
    cases.push_back(make_case(
        "where(c,t," + sv + ")", {in({2, 3}, boolean), in({2, 3}, r.t, -5, 5)},
        [sc](const Ts& t) { return lt::where(t[0], t[1], sc()); },
        [r, pick](const Rs& x) {
          return map2(x[0], x[1], r.want, [&](double c, double a) { return pick(c, a, r.s); });
        }));
    cases.push_back(make_case(
        "where(c," + sv + ",t)", {in({2, 1}, boolean), in({3}, r.t, -5, 5)},
        [sc](const Ts& t) { return lt::where(t[0], sc(), t[1]); },
        [r, pick](const Rs& x) {
          return map2(x[0], x[1], r.want, [&](double c, double b) { return pick(c, r.s, b); });
        }));
  }
  // both values single: a tensor, the condition, chooses between two constants
  cases.push_back(make_case(
      "where(c,2.5,-inf)", {in({4, 5}, boolean)},
      [](const Ts& t) {
        return lt::where(t[0], lt::full({}, 2.5), -std::numeric_limits<double>::infinity());
      },
      [](const Rs& x) {
        Ref out = x[0];
        out.dtype = f32;
        for (double& v : out.v) v = v != 0 ? 2.5 : -std::numeric_limits<double>::infinity();
        return out;
      }));
  // mixed tensor dtypes promote
  cases.push_back(make_case(
      "where_i32_f16->f16", {in({2, 3}, boolean), in({2, 3}, i32, -5, 5), in({2, 3}, f16)},
      [](const Ts& t) { return lt::where(t[0], t[1], t[2]); },
      [pick](const Rs& x) {
        return map_n({&x[0], &x[1], &x[2]}, f16,
                     [&](const Values& v) { return pick(v[0], v[1], v[2]); });
      }));
  return cases;
}

std::vector<Case> astype_cases() {
  std::vector<Case> cases;
  auto convert = [](double x, DType to) {
    if (to == boolean) return double(x != 0);
    if (is_int(to)) return std::trunc(x);  // toward zero, as C++ and PyTorch
    return x;
  };
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      std::vector<Input> inputs = {whole(in({3, 4}, from, -3, 3)),
                                   transposed(in({4, 5}, from, -3.9, 3.9))};
      for (const Input& x : inputs)
        cases.push_back(make_case(
            std::string("astype->") + short_name(to), {x},
            [to](const Ts& t) { return lt::astype(t[0], to); },
            [to, convert](const Rs& r) {
              return map1(r[0], to, [&](double v) { return convert(v, to); });
            }));
    }
  }
  for (DType d : kAllDTypes) {
    auto same = [](const Rs& r) { return r[0]; };
    cases.push_back(make_case(
        "clone", {in({2, 3}, d, -5, 5)}, [](const Ts& t) { return lt::clone(t[0]); }, same));
    cases.push_back(make_case(
        "clone(view)", {transposed(in({3, 4}, d, -5, 5))},
        [](const Ts& t) { return lt::clone(t[0]); }, same));
    cases.push_back(make_case(
        "clone(pending)", {in({2, 3}, d, -5, 5)},
        [](const Ts& t) { return lt::clone(lt::maximum(t[0], t[0])); }, same));
  }
  return cases;
}

// -------------------------------------------------------------------------- reductions

std::vector<Case> reduce_cases() {
  struct Config {
    std::vector<int> dims;
    bool all;
    bool keepdim;
  };
  std::vector<Config> configs;
  configs.push_back({{}, true, false});
  for (bool keep : {false, true}) {
    for (std::vector<int> dims : std::vector<std::vector<int>>{
             {0}, {1}, {2}, {-1}, {0, 2}, {-1, -3}, {1, 2}, {2, 0}, {0, 1, 2}})
      configs.push_back({dims, false, keep});
  }
  struct Op {
    const char* name;
    Red kind;
  };
  const Op ops[] = {{"sum", Red::Sum}, {"mean", Red::Mean}, {"amax", Red::Amax}};
  auto run = [](Red k, const Tensor& t, const Config& c) {
    if (c.all) return k == Red::Sum ? lt::sum(t) : k == Red::Mean ? lt::mean(t) : lt::amax(t);
    if (k == Red::Sum) return lt::sum(t, c.dims, c.keepdim);
    if (k == Red::Mean) return lt::mean(t, c.dims, c.keepdim);
    return lt::amax(t, c.dims, c.keepdim);
  };
  auto label = [](const char* name, const Config& c) {
    std::string s = name;
    if (c.all) return s + "(all)";
    s += "{";
    for (size_t i = 0; i < c.dims.size(); ++i) {
      if (i) s += ',';
      s += std::to_string(c.dims[i]);
    }
    return s + (c.keepdim ? "},keep" : "}");
  };
  std::vector<Case> cases;
  for (const Op& op : ops) {
    for (DType d : kAllDTypes) {
      if (op.kind == Red::Mean && !is_float(d)) continue;  // rejected: see OpsErrors
      const DType out = op.kind == Red::Sum && !is_float(d) ? i64 : d;
      auto add = [&](const Input& x, const Config& c) {
        cases.push_back(make_case(
            label(op.name, c), {x}, [run, k = op.kind, c](const Ts& t) { return run(k, t[0], c); },
            [k = op.kind, c, out](const Rs& r) {
              return reduce_ref(r[0], k, c.dims, c.all, c.keepdim, out);
            }));
      };
      for (const Config& c : configs) add(in({3, 4, 5}, d, -3, 3), c);
      // non-contiguous inputs: the reduced dim is the unit-stride one or the outer one
      for (const Config& c : std::vector<Config>{{{0}, false, false},
                                                 {{1}, false, true},
                                                 {{}, true, false},
                                                 {{-2, -1}, false, false}}) {
        add(transposed(in({6, 5}, d, -3, 3)), c);
        add(strided(in({4, 6}, d, -3, 3)), c);
        add(pending(in({6, 5}, d, -3, 3)), c);
      }
      add(transposed(in({2, 6, 5}, d, -3, 3)), {{0, 2}, false, false});
      add(in({}, d, -3, 3), {{}, true, false});
      add(in({}, d, -3, 3), {{0}, false, true});
      add(in({1, 7}, d, -3, 3), {{0}, false, false});
      // reductions big enough to be split over threads, inner and outer
      add(in({64, 300}, d, -3, 3), {{1}, false, false});
      add(in({300, 64}, d, -3, 3), {{0}, false, false});
      add(in({20, 6000}, d, -3, 3), {{0}, false, false});
      add(transposed(in({6000, 20}, d, -3, 3)), {{1}, false, true});
      // a broadcast view (stride 0) as the input
      const Config bc{{0, 2}, false, false};
      cases.push_back(make_case(
          label(op.name, bc) + "(broadcast_to[3,4,5])", {in({4, 1}, d, -3, 3)},
          [run, k = op.kind, bc](const Ts& t) {
            return run(k, lt::broadcast_to(t[0], {3, 4, 5}), bc);
          },
          [k = op.kind, bc, out](const Rs& r) {
            return reduce_ref(broadcast_ref(r[0], {3, 4, 5}), k, bc.dims, false, false, out);
          }));
    }
  }
  // int32 sums count in int64: these overflow int32 by far
  for (const Config& c : std::vector<Config>{{{1}, false, false}, {{}, true, false}})
    cases.push_back(make_case(
        label("sum", c) + "(big i32)", {in({4, 60}, i32, 1e9, 2.1e9)},
        [run, c](const Ts& t) { return run(Red::Sum, t[0], c); },
        [c](const Rs& r) { return reduce_ref(r[0], Red::Sum, c.dims, c.all, c.keepdim, i64); }));
  return cases;
}

std::vector<Case> softmax_cases() {
  std::vector<Case> cases;
  for (const bool log : {false, true}) {
    const char* name = log ? "log_softmax" : "softmax";
    auto add = [&](const Input& x, int dim) {
      cases.push_back(make_case(
          std::string(name) + "{" + std::to_string(dim) + "}", {x},
          [log, dim](const Ts& t) {
            return log ? lt::log_softmax(t[0], dim) : lt::softmax(t[0], dim);
          },
          [log, dim](const Rs& r) { return softmax_ref(r[0], dim, log); }));
    };
    for (DType d : kFloatDTypes) {
      for (int dim : {0, 1, 2, -1, -2}) add(in({3, 4, 5}, d, -3, 3), dim);
      // numerically stable: exp(1000) overflows, exp(x - max) does not
      add(in({4, 6}, d, 995, 1005), -1);
      add(in({4, 6}, d, -1005, -995), 0);
      add(transposed(in({6, 5}, d, -3, 3)), 0);
      add(transposed(in({6, 5}, d, -3, 3)), -1);
      add(strided(in({3, 7}, d, -3, 3)), 1);
      add(in({5}, d, -3, 3), 0);
      add(in({3, 1}, d, -3, 3), 1);  // a size-1 dim: all ones (zeros for log_softmax)
      add(pending(in({4, 6}, d, -3, 3)), -1);
    }
  }
  return cases;
}

// ------------------------------------------------------------------------- layout ops

std::vector<Case> layout_cases() {
  std::vector<Case> cases;
  auto add = [&](const std::string& name, std::vector<Input> ins,
                 std::function<Tensor(const Ts&)> op, std::function<Ref(const Rs&)> ref) {
    cases.push_back(make_case(name, std::move(ins), std::move(op), std::move(ref)));
  };
  for (DType d : kAllDTypes) {
    const Input x = in({2, 3, 4}, d, -9, 9);
    const Input xt = transposed(in({2, 4, 3}, d, -9, 9));  // a non-contiguous view
    const Input xp = pending(in({2, 3, 4}, d, -9, 9));     // a fused result, not yet stored
    // reshape: including -1, and from views that cannot be reshaped without a copy
    for (const Dims& target : std::vector<Dims>{{4, 6}, {-1, 2}, {24}, {2, -1, 2, 3}, {1, 24, 1}})
      for (const Input& src : {x, xt, xp})
        add(
            "reshape" + dims_str(target), {src},
            [target](const Ts& t) { return lt::reshape(t[0], lt::Shape(target)); },
            [target](const Rs& r) { return reshape_ref(r[0], target); });
    add(
        "reshape[-1]", {strided(in({3, 4}, d, -9, 9))},
        [](const Ts& t) { return lt::reshape(t[0], {-1}); },
        [](const Rs& r) { return reshape_ref(r[0], {-1}); });
    add(
        "reshape(exp)[6,4]", {in({2, 3, 4}, d, -2, 2)},
        [](const Ts& t) {
          return lt::reshape(lt::astype(t[0], f32) * 2, {6, 4});
        },
        [](const Rs& r) {
          return map1(reshape_ref(r[0], {6, 4}), f32, [](double v) { return 2 * v; });
        });
    // reshape of views that merge or split strided dims
    add(
        "reshape(broadcast_to[3,4])[12]", {in({3, 1}, d, -9, 9)},
        [](const Ts& t) {
          return lt::reshape(lt::broadcast_to(t[0], {3, 4}), {12});
        },
        [](const Rs& r) {
          return reshape_ref(broadcast_ref(r[0], {3, 4}), {12});
        });
    add(
        "reshape(broadcast_to[3,4])[3,2,2]", {in({3, 1}, d, -9, 9)},
        [](const Ts& t) {
          return lt::reshape(lt::broadcast_to(t[0], {3, 4}), {3, 2, 2});
        },
        [](const Rs& r) {
          return reshape_ref(broadcast_ref(r[0], {3, 4}), {3, 2, 2});
        });
    add(
        "reshape(slice{1,step2})[-1]", {in({4, 6}, d, -9, 9)},
        [](const Ts& t) { return lt::reshape(lt::slice(t[0], 1, 0, 6, 2), {-1}); },
        [](const Rs& r) { return reshape_ref(slice_ref(r[0], 1, 0, 6, 2), {-1}); });
    add(
        "reshape(slice{0,step2})[2,2,6]", {in({4, 6}, d, -9, 9)},
        [](const Ts& t) {
          return lt::reshape(lt::slice(t[0], 0, 1, 4, 2), {2, 2, 3});
        },
        [](const Rs& r) {
          return reshape_ref(slice_ref(r[0], 0, 1, 4, 2), {2, 2, 3});
        });
    add(
        "reshape(permute{1,2,0})[4,6]", {in({2, 3, 4}, d, -9, 9)},
        [](const Ts& t) {
          return lt::reshape(lt::permute(t[0], {1, 2, 0}), {4, 6});
        },
        [](const Rs& r) {
          return reshape_ref(permute_ref(r[0], {1, 2, 0}), {4, 6});
        });
    add(
        "reshape(transpose(0,2) of [2,1,3])[3,2]", {in({2, 1, 3}, d, -9, 9)},
        [](const Ts& t) {
          return lt::reshape(lt::transpose(t[0], 0, 2), {3, 2});
        },
        [](const Rs& r) {
          return reshape_ref(transpose_ref(r[0], 0, 2), {3, 2});
        });
    add(
        "reshape(reshape(transpose))", {in({4, 6}, d, -9, 9)},
        [](const Ts& t) {
          return lt::reshape(lt::reshape(lt::transpose(t[0]), {2, 3, 4}), {6, 4});
        },
        [](const Rs& r) {
          return reshape_ref(transpose_ref(r[0], 0, 1), {6, 4});
        });
    add(
        "transpose(slice(broadcast_to))", {in({3, 1}, d, -9, 9)},
        [](const Ts& t) {
          return lt::transpose(lt::slice(lt::broadcast_to(t[0], {2, 3, 5}), 2, 1, 5, 2), 0, 2);
        },
        [](const Rs& r) {
          return transpose_ref(slice_ref(broadcast_ref(r[0], {2, 3, 5}), 2, 1, 5, 2), 0, 2);
        });
    add(
        "select 1-d -> 0-d", {in({5}, d, -9, 9)},
        [](const Ts& t) { return lt::select(t[0], 0, 3); },
        [](const Rs& r) { return select_ref(r[0], 0, 3); });
    add(
        "unsqueeze 0-d", {in({}, d, -9, 9)}, [](const Ts& t) { return lt::unsqueeze(t[0], -1); },
        [](const Rs& r) {
          return Ref{{1}, r[0].dtype, r[0].v};
        });
    add(
        "stack 0-d", {in({}, d, -9, 9), in({}, d, -9, 9), in({}, d, -9, 9)},
        [](const Ts& t) { return lt::stack(t, 0); }, [](const Rs& r) { return stack_ref(r, 0); });
    add(
        "concat 1-d", {in({2}, d, -9, 9), strided(in({3}, d, -9, 9)), in({1}, d, -9, 9)},
        [](const Ts& t) { return lt::concat(t); },
        [d](const Rs& r) { return concat_ref(r, 0, d); });
    add(
        "index_select 1-d", {in({5}, d, -9, 9)},
        [](const Ts& t) {
          return lt::index_select(t[0], 0, lt::tensor({4, 4, 0}));
        },
        [](const Rs& r) {
          return index_select_ref(r[0], 0, {4, 4, 0});
        });
    // transpose and permute
    for (auto [d0, d1] : std::vector<std::pair<int, int>>{{-2, -1}, {0, 2}, {-1, 0}, {1, 1}})
      for (const Input& src : {x, xt, xp})
        add(
            "transpose(" + std::to_string(d0) + "," + std::to_string(d1) + ")", {src},
            [d0, d1](const Ts& t) { return lt::transpose(t[0], d0, d1); },
            [d0, d1](const Rs& r) { return transpose_ref(r[0], d0, d1); });
    add(
        "transpose(1d)", {in({5}, d, -9, 9)}, [](const Ts& t) { return lt::transpose(t[0]); },
        [](const Rs& r) { return r[0]; });
    for (const std::vector<int>& perm :
         std::vector<std::vector<int>>{{2, 0, 1}, {1, 2, 0}, {-1, 0, 1}, {0, 1, 2}})
      for (const Input& src : {x, xt, xp})
        add(
            "permute{" + std::to_string(perm[0]) + std::to_string(perm[1]) +
                std::to_string(perm[2]) + "}",
            {src}, [perm](const Ts& t) { return lt::permute(t[0], perm); },
            [perm](const Rs& r) { return permute_ref(r[0], perm); });
    // broadcast_to
    const std::vector<std::pair<Input, Dims>> bcast = {
        {in({3, 1}, d, -9, 9), {2, 3, 4}},
        {in({}, d, -9, 9), {2, 3}},
        {in({4}, d, -9, 9), {3, 4}},
        {transposed(in({3, 1}, d, -9, 9)), {2, 3, 5}},
        {pending(in({1, 4}, d, -9, 9)), {3, 4}},
        {in({2, 3}, d, -9, 9), {2, 3}},
    };
    for (const auto& [src, target] : bcast)
      add(
          "broadcast_to" + dims_str(target), {src},
          [target](const Ts& t) { return lt::broadcast_to(t[0], lt::Shape(target)); },
          [target](const Rs& r) { return broadcast_ref(r[0], target); });
    // slice: steps, negative start/stop, clamping, empty results, views of views
    struct SliceRow {
      int dim;
      int64_t start, stop, step;
    };
    const SliceRow slices[] = {{0, 0, 1, 1},      {2, 1, 4, 2},  {-1, -3, -1, 1},
                               {1, -100, 100, 2}, {2, 0, 4, 3},  {1, 2, 1, 1},
                               {0, 1, 2, 1},      {-2, 0, 3, 5}, {2, -1, 4, 1}};
    for (const SliceRow& s : slices)
      for (const Input& src : {x, xt, xp})
        add(
            "slice(" + std::to_string(s.dim) + "," + std::to_string(s.start) + "," +
                std::to_string(s.stop) + "," + std::to_string(s.step) + ")",
            {src}, [s](const Ts& t) { return lt::slice(t[0], s.dim, s.start, s.stop, s.step); },
            [s](const Rs& r) { return slice_ref(r[0], s.dim, s.start, s.stop, s.step); });
    add(
        "slice(slice)", {in({9, 8}, d, -9, 9)},
        [](const Ts& t) { return lt::slice(lt::slice(t[0], 1, 1, 8, 2), 0, -7, 9, 3); },
        [](const Rs& r) { return slice_ref(slice_ref(r[0], 1, 1, 8, 2), 0, -7, 9, 3); });
    // select
    for (auto [dim, index] : std::vector<std::pair<int, int64_t>>{{0, 1}, {-1, -1}, {1, 2}, {2, 0}})
      for (const Input& src : {x, xt, xp})
        add(
            "select(" + std::to_string(dim) + "," + std::to_string(index) + ")", {src},
            [dim, index](const Ts& t) { return lt::select(t[0], dim, index); },
            [dim, index](const Rs& r) { return select_ref(r[0], dim, index); });
    // unsqueeze and squeeze
    for (int dim : {0, 1, 3, -1, -4})
      add(
          "unsqueeze(" + std::to_string(dim) + ")", {xt},
          [dim](const Ts& t) { return lt::unsqueeze(t[0], dim); },
          [dim](const Rs& r) {
            Ref o = r[0];
            o.shape.insert(o.shape.begin() + norm_dim(dim, r[0].ndim() + 1), 1);
            return o;
          });
    for (int dim : {1, -2})
      add(
          "squeeze(" + std::to_string(dim) + ")", {in({2, 1, 4}, d, -9, 9)},
          [dim](const Ts& t) { return lt::squeeze(t[0], dim); },
          [](const Rs& r) {
            return Ref{{2, 4}, r[0].dtype, r[0].v};
          });
    add(
        "squeeze(0d->unsqueeze)", {in({}, d, -9, 9)},
        [](const Ts& t) { return lt::squeeze(lt::unsqueeze(t[0], 0), 0); },
        [](const Rs& r) { return r[0]; });
    // concat: three inputs, several dims, views mixed in
    add(
        "concat{0}", {in({1, 3, 4}, d, -9, 9), in({2, 3, 4}, d, -9, 9), in({3, 3, 4}, d, -9, 9)},
        [](const Ts& t) { return lt::concat(t, 0); },
        [d](const Rs& r) { return concat_ref(r, 0, d); });
    add(
        "concat{1}",
        {in({2, 1, 4}, d, -9, 9), transposed(in({2, 2, 4}, d, -9, 9)), in({2, 3, 4}, d, -9, 9)},
        [](const Ts& t) { return lt::concat(t, 1); },
        [d](const Rs& r) { return concat_ref(r, 1, d); });
    add(
        "concat{-1}",
        {in({2, 3, 1}, d, -9, 9), strided(in({2, 3, 2}, d, -9, 9)),
         transposed(in({2, 3, 4}, d, -9, 9))},
        [](const Ts& t) { return lt::concat(t, -1); },
        [d](const Rs& r) { return concat_ref(r, -1, d); });
    add(
        "concat{0}(one)", {in({2, 3}, d, -9, 9)}, [](const Ts& t) { return lt::concat(t, 0); },
        [d](const Rs& r) { return concat_ref(r, 0, d); });
    add(
        "concat{1}(pending)", {in({2, 3}, d, -5, 5), in({2, 2}, d, -5, 5)},
        [](const Ts& t) {
          return lt::concat({lt::maximum(t[0], t[0]), lt::minimum(t[1], t[1])}, 1);
        },
        [d](const Rs& r) { return concat_ref(r, 1, d); });
    add(
        "concat{0}(same pending twice)", {in({2, 3}, d, -5, 5)},
        [](const Ts& t) {
          Tensor m = lt::maximum(t[0], t[0]);
          return lt::concat({m, t[0], m}, 0);
        },
        [d](const Rs& r) {
          return concat_ref({r[0], r[0], r[0]}, 0, d);
        });
    // stack
    add(
        "stack{1}(pending)", {pending(in({3, 4}, d, -9, 9)), in({3, 4}, d, -9, 9)},
        [](const Ts& t) { return lt::stack(t, 1); }, [](const Rs& r) { return stack_ref(r, 1); });
    for (int dim : {0, 1, 2, -1, -3})
      add(
          "stack{" + std::to_string(dim) + "}",
          {in({3, 4}, d, -9, 9), transposed(in({3, 4}, d, -9, 9)), in({3, 4}, d, -9, 9)},
          [dim](const Ts& t) { return lt::stack(t, dim); },
          [dim](const Rs& r) { return stack_ref(r, dim); });
    // index_select: repeated indices, int32 and int64 indices
    struct IndexRow {
      int dim;
      std::vector<int64_t> index;
      bool int32_index;
    };
    const IndexRow rows[] = {{0, {1, 0, 1, 1}, false},
                             {2, {2, 0, 2}, true},
                             {-2, {2, 2, 0, 1, 2}, false},
                             {1, {1}, true}};
    for (const IndexRow& r : rows)
      for (const Input& src : {x, xt, xp})
        add(
            std::string("index_select") + (r.int32_index ? "(i32)" : "(i64)") + "{" +
                std::to_string(r.dim) + "}" + dims_str(r.index),
            {src},
            [r](const Ts& t) {
              const lt::Shape s{static_cast<int64_t>(r.index.size())};
              Tensor idx = r.int32_index
                               ? lt::tensor(std::vector<int32_t>(r.index.begin(), r.index.end()), s)
                               : lt::tensor(r.index, s);
              return lt::index_select(t[0], r.dim, idx);
            },
            [r](const Rs& x) { return index_select_ref(x[0], r.dim, r.index); });
    // index_add (index_select's VJP): repeats accumulate, any layout of both operands
    for (const IndexRow& r : rows) {
      if (d == boolean) continue;
      Dims sshape = x.shape;
      sshape[static_cast<size_t>(norm_dim(r.dim, 3))] = static_cast<int64_t>(r.index.size());
      const Input src = in(sshape, d, -9, 9);
      for (const Input& dst : {x, xp})
        add(
            std::string("index_add{") + std::to_string(r.dim) + "}" + dims_str(r.index), {dst, src},
            [r](const Ts& t) {
              return lt::index_add(
                  t[0], r.dim, lt::tensor(r.index, {static_cast<int64_t>(r.index.size())}), t[1]);
            },
            [r](const Rs& x) { return index_add_ref(x[0], r.dim, r.index, x[1]); });
    }
    add(
        "index_select(strided index)", {x},
        [](const Ts& t) {
          Tensor idx = lt::tensor(std::vector<int64_t>{3, 9, 1, 9, 3, 9}, lt::Shape{6});
          return lt::index_select(t[0], 2, lt::slice(idx, 0, 0, 6, 2));
        },
        [](const Rs& r) {
          return index_select_ref(r[0], 2, {3, 1, 3});
        });
    add(
        "index_select(arange index)", {xt},
        [](const Ts& t) { return lt::index_select(t[0], 1, lt::arange(3, -1, -2, i32)); },
        [](const Rs& r) {
          return index_select_ref(r[0], 1, {3, 1});
        });
  }
  // concat promotes mixed dtypes
  cases.push_back(make_case(
      "concat(i32,f32)->f32", {in({2, 3}, i32, -9, 9), in({1, 3}, f32)},
      [](const Ts& t) { return lt::concat(t, 0); },
      [](const Rs& r) { return concat_ref(r, 0, f32); }));
  cases.push_back(make_case(
      "concat(bool,i32,f16)->f16", {in({2, 1}, boolean), in({2, 2}, i32, -9, 9), in({2, 3}, f16)},
      [](const Ts& t) { return lt::concat(t, 1); },
      [](const Rs& r) { return concat_ref(r, 1, f16); }));
  return cases;
}

// ---------------------------------------------------------------------------- matmul

std::vector<Case> matmul_cases() {
  struct Row {
    Input a, b;
  };
  auto mk = [](Dims a, Dims b) {
    return Row{in(std::move(a), f32, -1, 1), in(std::move(b), f32, -1, 1)};
  };
  std::vector<Row> rows = {
      mk({3, 4}, {4, 5}),       mk({4}, {4, 5}),
      mk({3, 4}, {4}),          mk({4}, {4}),
      mk({2, 3, 4}, {2, 4, 5}), mk({2, 1, 3, 4}, {5, 4, 2}),
      mk({4}, {2, 4, 5}),       mk({2, 3, 4}, {4}),
      mk({2, 3, 4}, {4, 5}),    mk({3, 4}, {2, 4, 5}),
      mk({1, 4}, {4, 1}),       mk({5, 33}, {33, 7}),
      mk({1, 3, 4}, {2, 4, 5}), mk({2, 3, 4}, {1, 4, 5}),
      mk({64, 128}, {128, 96}), mk({8, 32, 64}, {64, 16}),
      mk({3, 1}, {1, 4}),
  };
  // operands as lt::transpose views (BLAS reads them transposed)
  for (auto [ta, tb] :
       std::vector<std::pair<bool, bool>>{{true, false}, {false, true}, {true, true}}) {
    Row r = mk({3, 4}, {4, 5});
    Row rb = mk({2, 3, 4}, {2, 4, 5});
    if (ta) r.a = transposed(r.a), rb.a = transposed(rb.a);
    if (tb) r.b = transposed(r.b), rb.b = transposed(rb.b);
    rows.push_back(r);
    rows.push_back(rb);
  }
  rows.push_back({strided(in({3, 4}, f32, -1, 1)), in({4, 2}, f32, -1, 1)});
  rows.push_back({in({4}, f32, -1, 1), strided(in({4, 3}, f32, -1, 1))});
  rows.push_back({strided(in({4}, f32, -1, 1)), in({4, 3}, f32, -1, 1)});
  rows.push_back({in({3, 4}, f32, -1, 1), strided(in({4}, f32, -1, 1))});
  rows.push_back({pending(in({2, 3, 4}, f32, -1, 1)), transposed(in({4, 2}, f32, -1, 1))});
  std::vector<Case> cases;
  for (DType d : {f32, f64, f16, bf16, i32, i64}) {
    for (Row r : rows) {
      r.a.dtype = r.b.dtype = d;
      if (is_int(d)) r.a.lo = r.b.lo = -3, r.a.hi = r.b.hi = 3;
      // a dot product of length k rounds k times in float32
      const double k = static_cast<double>(r.a.shape.back());
      cases.push_back(make_case(
          "matmul", {r.a, r.b}, [](const Ts& t) { return lt::matmul(t[0], t[1]); },
          [d](const Rs& x) { return matmul_ref(x[0], x[1], d); }, std::max(1.0, k / 16)));
    }
    // an lhs whose columns are not unit-stride (copied before BLAS), and a broadcast lhs
    cases.push_back(make_case(
        "matmul(slice step 2)", {in({3, 8}, d, -3, 3), in({4, 2}, d, -3, 3)},
        [](const Ts& t) { return lt::matmul(lt::slice(t[0], 1, 0, 8, 2), t[1]); },
        [d](const Rs& x) { return matmul_ref(slice_ref(x[0], 1, 0, 8, 2), x[1], d); }));
    cases.push_back(make_case(
        "matmul(broadcast_to lhs)", {in({3, 4}, d, -3, 3), in({2, 4, 5}, d, -3, 3)},
        [](const Ts& t) {
          return lt::matmul(lt::broadcast_to(t[0], {2, 3, 4}), t[1]);
        },
        [d](const Rs& x) {
          return matmul_ref(broadcast_ref(x[0], {2, 3, 4}), x[1], d);
        }));
    cases.push_back(make_case(
        "matmul(x,x^T)", {in({3, 4}, d, -3, 3)},
        [](const Ts& t) { return lt::matmul(t[0], lt::transpose(t[0])); },
        [d](const Rs& x) { return matmul_ref(x[0], transpose_ref(x[0], 0, 1), d); }));
    cases.push_back(make_case(
        "matmul(pending)", {in({3, 4}, d, -3, 3), in({4, 5}, d, -3, 3)},
        [](const Ts& t) {
          return lt::matmul(lt::maximum(t[0], t[0]), lt::transpose(lt::transpose(t[1])));
        },
        [d](const Rs& x) { return matmul_ref(x[0], x[1], d); }));
  }
  // mixed dtypes promote
  cases.push_back(make_case(
      "matmul(i32,f32)->f32", {in({3, 4}, i32, -3, 3), in({4, 2}, f32)},
      [](const Ts& t) { return lt::matmul(t[0], t[1]); },
      [](const Rs& x) { return matmul_ref(x[0], x[1], f32); }));
  cases.push_back(make_case(
      "matmul(i32,i64)->i64", {in({3, 4}, i32, -3, 3), in({4}, i64, -3, 3)},
      [](const Ts& t) { return lt::matmul(t[0], t[1]); },
      [](const Rs& x) { return matmul_ref(x[0], x[1], i64); }));
  cases.push_back(make_case(
      "matmul(f16,f32)->f32", {in({2, 3}, f16), in({3, 2}, f32)},
      [](const Ts& t) { return lt::matmul(t[0], t[1]); },
      [](const Rs& x) { return matmul_ref(x[0], x[1], f32); }));
  return cases;
}

// ---------------------------------------------------------------------------- creation

std::vector<Case> creation_cases() {
  std::vector<Case> cases;
  auto add = [&](const std::string& name, std::function<Tensor()> op, Ref want) {
    cases.push_back(make_case(
        name, {}, [op](const Ts&) { return op(); }, [want](const Rs&) { return want; }));
  };
  auto values = [](const Dims& shape, DType d, Values v) { return Ref{shape, d, std::move(v)}; };
  for (DType d : kAllDTypes) {
    const std::string n = short_name(d);
    add(
        "zeros " + n,
        [d] {
          return lt::zeros({2, 3}, d);
        },
        constant({2, 3}, d, 0));
    add(
        "ones " + n,
        [d] {
          return lt::ones({3, 1, 2}, d);
        },
        constant({3, 1, 2}, d, 1));
    add(
        "full(3) " + n,
        [d] {
          return lt::full({2, 2}, 3, d);
        },
        constant({2, 2}, d, d == boolean ? 1 : 3));
    add(
        "full(-2.75) " + n, [d] { return lt::full({4}, -2.75, d); },
        constant({4}, d,
                 d == boolean  ? 1
                 : is_float(d) ? -2.75
                               : -2));
    add(
        "full(0d) " + n, [d] { return lt::full({}, 1.5, d); },
        constant({}, d,
                 d == boolean  ? 1
                 : is_float(d) ? 1.5
                               : 1));
    add(
        "zeros_like " + n,
        [d] {
          return lt::zeros_like(lt::ones({2, 5}, d));
        },
        constant({2, 5}, d, 0));
    add(
        "ones_like " + n, [d] { return lt::ones_like(lt::zeros({3}, d)); }, constant({3}, d, 1));
    add(
        "scalar(2.5," + n + ")", [d] { return lt::scalar(2.5, d); },
        constant({}, d,
                 d == boolean  ? 1
                 : is_float(d) ? 2.5
                               : 2));
  }
  add(
      "full(true)", [] { return lt::full({3}, true); }, constant({3}, f32, 1));
  add(
      "scalar(1.5)", [] { return lt::scalar(1.5); }, constant({}, f64, 1.5));
  add(
      "scalar(1.5f)", [] { return lt::scalar(1.5f); }, constant({}, f32, 1.5));
  add(
      "scalar(3)", [] { return lt::scalar(3); }, constant({}, i64, 3));
  add(
      "scalar(true)", [] { return lt::scalar(true); }, constant({}, boolean, 1));
  add(
      "tensor{float}",
      [] {
        return lt::tensor({1.5f, -2.f});
      },
      values({2}, f32, {1.5, -2}));
  add(
      "tensor{double}",
      [] {
        return lt::tensor({1.5, -2.0, 0.1});
      },
      values({3}, f64, {1.5, -2, 0.1}));
  add(
      "tensor{int}",
      [] {
        return lt::tensor({3, -4});
      },
      values({2}, i64, {3, -4}));
  add(
      "tensor{bool}",
      [] {
        return lt::tensor({true, false, true});
      },
      values({3}, boolean, {1, 0, 1}));
  add(
      "astype(scalar(2.75),i32)", [] { return lt::astype(lt::scalar(2.75), i32); },
      constant({}, i32, 2));
  add(
      "astype(scalar(-2.75),i64)", [] { return lt::astype(lt::scalar(-2.75), i64); },
      constant({}, i64, -2));
  add(
      "astype(scalar(0.5),bool)", [] { return lt::astype(lt::scalar(0.5), boolean); },
      constant({}, boolean, 1));
  add(
      "astype(full(2.75),i32)", [] { return lt::astype(lt::full({3}, 2.75), i32); },
      constant({3}, i32, 2));
  add(
      "astype(full(0.25,f64),bool)", [] { return lt::astype(lt::full({2}, 0.25, f64), boolean); },
      constant({2}, boolean, 1));
  add(
      "scalar(int64 big)", [] { return lt::scalar(int64_t{1} << 53 | 1); },
      constant({}, i64, 9007199254740993.0));
  // arange: default int64, float dtypes, negative and fractional steps
  add(
      "arange(5)", [] { return lt::arange(5); }, values({5}, i64, {0, 1, 2, 3, 4}));
  add(
      "arange(2,11,3)", [] { return lt::arange(2, 11, 3); }, values({3}, i64, {2, 5, 8}));
  add(
      "arange(10,0,-3)", [] { return lt::arange(10, 0, -3); }, values({4}, i64, {10, 7, 4, 1}));
  add(
      "arange(4,i32)", [] { return lt::arange(4, i32); }, values({4}, i32, {0, 1, 2, 3}));
  add(
      "arange(1,-1,-0.25,f32)", [] { return lt::arange(1, -1, -0.25, f32); },
      values({8}, f32, {1, 0.75, 0.5, 0.25, 0, -0.25, -0.5, -0.75}));
  add(
      "arange(1,2.5,0.5,f64)", [] { return lt::arange(1, 2.5, 0.5, f64); },
      values({3}, f64, {1, 1.5, 2}));
  add(
      "arange(-3,3,1.5,f16)", [] { return lt::arange(-3, 3, 1.5, f16); },
      values({4}, f16, {-3, -1.5, 0, 1.5}));
  add(
      "arange(0,1,0.1,f64)", [] { return lt::arange(0, 1, 0.1, f64); },
      [] {
        Values v;
        for (int i = 0; i < 10; ++i) v.push_back(0.1 * i);
        return Ref{{10}, f64, v};
      }());
  add(
      "arange(0,2000,1,f32)", [] { return lt::arange(0, 2000, 1, f32); },
      [] {
        Values v(2000);
        std::iota(v.begin(), v.end(), 0.0);
        return Ref{{2000}, f32, v};
      }());
  add(
      "arange(5,bf16)*2", [] { return lt::arange(5, bf16) * 2; },
      values({5}, bf16, {0, 2, 4, 6, 8}));
  return cases;
}

// ----------------------------------------------------------------- fusion and edge cases

double chain_ref(double x, double y) {
  double t = x * 1.5;
  t = t + y;
  t = 1 / (1 + std::exp(-t));
  t = t - x;
  t = std::tanh(t);
  t = t * t;
  t = std::exp(t);
  return std::sqrt(t + 0.5);
}

/** Eight elementwise ops in one fused kernel (plus the scalar operands). */
Tensor chain(const Tensor& x, const Tensor& y) {
  Tensor t = x * 1.5;
  t = t + y;
  t = lt::sigmoid(t);
  t = t - x;
  t = lt::tanh(t);
  t = t * t;
  t = lt::exp(t);
  return lt::sqrt(t + 0.5);
}

std::vector<Case> fusion_cases() {
  std::vector<Case> cases;
  // [300, 500] is many 1024-element tiles, spread over the thread pool
  const std::vector<std::pair<Input, Input>> pairs = {
      {in({300, 500}, f32), in({500}, f32)},
      {transposed(in({300, 500}, f32)), in({300, 1}, f32)},
      {strided(in({300, 500}, f32)), in({300, 500}, f32)},
      {in({300, 500}, f64), in({}, f64)},
      {in({300, 500}, f16), in({500}, f16)},
      {in({300, 500}, bf16), transposed(in({300, 500}, bf16))},
      {in({300, 500}, f32), in({300, 500}, i32, -2, 2)},
  };
  for (const auto& [x, y] : pairs) {
    const DType out = is_float(x.dtype) ? x.dtype : f32;
    cases.push_back(make_case(
        "chain8", {x, y}, [](const Ts& t) { return chain(t[0], t[1]); },
        [out](const Rs& r) { return map2(r[0], r[1], out, chain_ref); }));
  }
  // fused chains feeding a reduction, a softmax and a matmul
  cases.push_back(make_case(
      "sum(chain8){1}", {in({300, 500}, f32), in({500}, f32)},
      [](const Ts& t) { return lt::sum(chain(t[0], t[1]), {1}); },
      [](const Rs& r) {
        return reduce_ref(map2(r[0], r[1], f32, chain_ref), Red::Sum, {1}, false, false, f32);
      }));
  cases.push_back(make_case(
      "mean(chain8){0}", {transposed(in({300, 500}, f32)), in({500}, f32)},
      [](const Ts& t) { return lt::mean(chain(t[0], t[1]), {0}, true); },
      [](const Rs& r) {
        return reduce_ref(map2(r[0], r[1], f32, chain_ref), Red::Mean, {0}, false, true, f32);
      }));
  cases.push_back(make_case(
      "softmax(chain8)", {in({30, 50}, f32), in({50}, f32)},
      [](const Ts& t) { return lt::softmax(chain(t[0], t[1]), 0); },
      [](const Rs& r) { return softmax_ref(map2(r[0], r[1], f32, chain_ref), 0, false); }));
  cases.push_back(make_case(
      "matmul(chain8,x)", {in({20, 30}, f32), in({30}, f32), in({30, 10}, f32)},
      [](const Ts& t) { return lt::matmul(chain(t[0], t[1]), t[2]); },
      [](const Rs& r) { return matmul_ref(map2(r[0], r[1], f32, chain_ref), r[2], f32); }));
  cases.push_back(make_case(
      "where(x>0,x,0.25*x)", {in({300, 500}, f32)},
      [](const Ts& t) { return lt::where(t[0] > 0, t[0], 0.25 * t[0]); },
      [](const Rs& r) { return map1(r[0], f32, [](double x) { return x > 0 ? x : 0.25 * x; }); }));
  cases.push_back(make_case(
      "(sum(x)+1)*x", {in({40, 50}, f32)}, [](const Ts& t) { return (lt::sum(t[0]) + 1) * t[0]; },
      [](const Rs& r) {
        const Ref s = reduce_ref(r[0], Red::Sum, {}, true, false, f32);
        return map1(r[0], f32, [&](double x) { return (s.v[0] + 1) * x; });
      }));
  cases.push_back(make_case(
      "x - mean(x){1,keep}", {in({30, 500}, f16)},
      [](const Ts& t) { return t[0] - lt::mean(t[0], {1}, true); },
      [](const Rs& r) {
        Ref m = reduce_ref(r[0], Red::Mean, {1}, false, true, f16);
        m.v = stored_values(m.v, f16);  // the mean is an f16 tensor before the subtraction
        return map2(r[0], m, f16, [](double x, double mu) { return x - mu; });
      }));
  cases.push_back(make_case(
      "x*x+x reuses one input", {in({300, 500}, f32)},
      [](const Ts& t) { return t[0] * t[0] + t[0] - lt::exp(t[0]) / 2; },
      [](const Rs& r) {
        return map1(r[0], f32, [](double x) { return x * x + x - std::exp(x) / 2; });
      }));
  cases.push_back(make_case(
      "concat of fused parts", {in({100, 30}, f32), in({100, 20}, f32)},
      [](const Ts& t) {
        return lt::concat({lt::exp(t[0]) * 2, t[1] - 1, lt::neg(t[0])}, 1);
      },
      [](const Rs& r) {
        return concat_ref({map1(r[0], f32, [](double x) { return std::exp(x) * 2; }),
                           map1(r[1], f32, [](double x) { return x - 1; }),
                           map1(r[0], f32, [](double x) { return -x; })},
                          1, f32);
      }));
  return cases;
}

std::vector<Case> empty_cases() {
  std::vector<Case> cases;
  cases.push_back(make_case(
      "exp", {in({0, 3}, f32)}, [](const Ts& t) { return lt::exp(t[0]); },
      [](const Rs& r) { return map1(r[0], f32, [](double x) { return std::exp(x); }); }));
  cases.push_back(make_case(
      "sum{0}", {in({0, 3}, f32)}, [](const Ts& t) { return lt::sum(t[0], {0}); },
      [](const Rs& r) { return reduce_ref(r[0], Red::Sum, {0}, false, false, f32); }));
  cases.push_back(make_case(
      "sum(all)", {in({0, 3}, f32)}, [](const Ts& t) { return lt::sum(t[0]); },
      [](const Rs& r) { return reduce_ref(r[0], Red::Sum, {}, true, false, f32); }));
  cases.push_back(make_case(
      "mean{0} is NaN", {in({0, 3}, f32)}, [](const Ts& t) { return lt::mean(t[0], {0}); },
      [](const Rs& r) { return reduce_ref(r[0], Red::Mean, {0}, false, false, f32); }));
  cases.push_back(make_case(
      "amax{1}", {in({0, 3}, f32)}, [](const Ts& t) { return lt::amax(t[0], {1}); },
      [](const Rs& r) { return reduce_ref(r[0], Red::Amax, {1}, false, false, f32); }));
  cases.push_back(make_case(
      "concat{0}", {in({0, 3}, f32), in({2, 3}, f32)}, [](const Ts& t) { return lt::concat(t, 0); },
      [](const Rs& r) { return concat_ref(r, 0, f32); }));
  cases.push_back(make_case(
      "matmul k=0", {in({2, 0}, f32), in({0, 3}, f32)},
      [](const Ts& t) { return lt::matmul(t[0], t[1]); },
      [](const Rs& r) { return matmul_ref(r[0], r[1], f32); }));
  cases.push_back(make_case(
      "index_select(empty index)", {in({2, 3}, f32)},
      [](const Ts& t) {
        return lt::index_select(t[0], 0, lt::tensor(std::vector<int64_t>{}, lt::Shape{0}));
      },
      [](const Rs& r) { return index_select_ref(r[0], 0, {}); }));
  return cases;
}

// ------------------------------------------------------------------------ special values

// NaN, infinities, signed zeros and integer wraparound, with PyTorch's answers.
std::vector<Case> special_cases() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const Values specials = {nan, inf, -inf, -0.0, 0.0, 1.5, -2.0};
  std::vector<Case> cases;
  for (DType d : kFloatDTypes) {
    const Input x = fixed({7}, d, specials);
    const Input y = fixed({7, 1}, d, specials);  // against x: every pair of specials
    struct Un {
      const char* name;
      Tensor (*op)(const Tensor&);
      double (*ref)(double);
    };
    const Un unary[] = {
        {"neg", lt::neg, [](double v) { return -v; }},
        {"exp", lt::exp, [](double v) { return std::exp(v); }},
        {"log", lt::log, [](double v) { return std::log(v); }},
        {"log1p", lt::log1p, [](double v) { return std::log1p(v); }},
        {"tanh", lt::tanh, [](double v) { return std::tanh(v); }},
        {"sigmoid", lt::sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }},
        {"relu", lt::relu, [](double v) { return std::isnan(v) || v > 0 ? v : 0; }},
        {"sqrt", lt::sqrt, [](double v) { return std::sqrt(v); }},
        {"rsqrt", lt::rsqrt, [](double v) { return 1 / std::sqrt(v); }},
        {"abs", lt::abs, [](double v) { return std::fabs(v); }},
    };
    for (const Un& u : unary)
      cases.push_back(make_case(
          u.name, {x}, [op = u.op](const Ts& t) { return op(t[0]); },
          [f = u.ref, d](const Rs& r) { return map1(r[0], d, f); }));
    for (const BinRow& r : binary_rows()) {
      if (r.name[0] == 'o' || r.kind == BinKind::Pow) continue;
      const DType out = same_dtype_result(r.kind, d);
      cases.push_back(make_case(
          r.name, {y, x}, [op = r.op](const Ts& t) { return op(t[0], t[1]); },
          [f = r.ref, out](const Rs& v) { return map2(v[0], v[1], out, f); }));
    }
    for (const Red k : {Red::Sum, Red::Mean, Red::Amax}) {
      cases.push_back(make_case(
          k == Red::Sum    ? "sum{1}"
          : k == Red::Mean ? "mean{1}"
                           : "amax{1}",
          {fixed({3, 3}, d, {1, nan, -2, inf, 0, 5, -inf, -inf, 3})},
          [k](const Ts& t) {
            return k == Red::Sum    ? lt::sum(t[0], {1})
                   : k == Red::Mean ? lt::mean(t[0], {1})
                                    : lt::amax(t[0], {1});
          },
          [k, d](const Rs& r) { return reduce_ref(r[0], k, {1}, false, false, d); }));
    }
    // masked attention rows: -inf entries get probability 0; a fully masked row is NaN
    const Input masked =
        fixed({3, 4}, d, {0, -inf, 1, -inf, 2, 2, -inf, 0.5, -inf, -inf, -inf, -inf});
    for (const bool log : {false, true})
      cases.push_back(make_case(
          log ? "log_softmax(masked)" : "softmax(masked)", {masked},
          [log](const Ts& t) { return log ? lt::log_softmax(t[0]) : lt::softmax(t[0]); },
          [log](const Rs& r) { return softmax_ref(r[0], -1, log); }));
    cases.push_back(make_case(
        "where(x>0,x,0)", {x}, [](const Ts& t) { return lt::where(t[0] > 0, t[0], 0); },
        [d](const Rs& r) { return map1(r[0], d, [](double v) { return v > 0 ? v : 0; }); }));
    for (DType to : kFloatDTypes)
      cases.push_back(make_case(
          std::string("astype->") + short_name(to), {x},
          [to](const Ts& t) { return lt::astype(t[0], to); },
          [to](const Rs& r) { return map1(r[0], to, [](double v) { return v; }); }));
    cases.push_back(make_case(
        "astype->bool", {x}, [](const Ts& t) { return lt::astype(t[0], boolean); },
        [](const Rs& r) { return map1(r[0], boolean, [](double v) { return double(v != 0); }); }));
  }
  // A float16/bfloat16 constant holds the rounded value, like any tensor of that dtype, so
  // it equals the same number stored in a buffer (PyTorch also casts a plain number to the
  // common dtype before comparing).
  for (DType d : {f16, bf16}) {
    const int bits = d == f16 ? 11 : 8;
    const Input x = fixed({3}, d, {0.1, 0.3, 0.1});
    auto equals = [bits](double c) {
      return [bits, c](const Rs& r) {
        return map1(r[0], boolean,
                    [&](double v) { return double(v == round_significand(c, bits)); });
      };
    };
    cases.push_back(make_case(
        "full(0.1)==x", {x}, [d](const Ts& t) { return lt::full({3}, 0.1, d) == t[0]; },
        equals(0.1)));
    cases.push_back(make_case(
        "scalar(0.3,dtype)==x", {x}, [d](const Ts& t) { return lt::scalar(0.3, d) == t[0]; },
        equals(0.3)));
    cases.push_back(make_case(
        "x==0.1", {x}, [](const Ts& t) { return t[0] == 0.1; }, equals(0.1)));
    cases.push_back(make_case(
        "x-full(0.1) exact", {fixed({2}, d, {0.1})},
        [d](const Ts& t) { return t[0] - lt::full({2}, 0.1, d); },
        [d](const Rs& r) { return map1(r[0], d, [](double) { return 0.0; }); }, 0));
  }
  // true division of integers by zero gives infinities and NaN
  cases.push_back(make_case(
      "i32/0", {fixed({3}, i32, {1, 0, -1}), fixed({3}, i32, {0})},
      [](const Ts& t) { return t[0] / t[1]; },
      [](const Rs& r) { return map2(r[0], r[1], f32, [](double a, double b) { return a / b; }); }));
  // int32 arithmetic wraps around, as in PyTorch
  const Values extremes = {2147483647, -2147483648.0, 65536, -3};
  auto wrap32 = [](double v) { return double(static_cast<int32_t>(static_cast<int64_t>(v))); };
  cases.push_back(make_case(
      "i32+1 wraps", {fixed({4}, i32, extremes)}, [](const Ts& t) { return t[0] + 1; },
      [wrap32](const Rs& r) { return map1(r[0], i32, [&](double a) { return wrap32(a + 1); }); }));
  cases.push_back(make_case(
      "i32*i32 wraps", {fixed({4}, i32, extremes), fixed({4}, i32, {2, 2, 65536, 5})},
      [](const Ts& t) { return t[0] * t[1]; },
      [wrap32](const Rs& r) {
        return map2(r[0], r[1], i32, [&](double a, double b) {
          return wrap32(
              double(static_cast<int64_t>(a) * static_cast<int64_t>(b) % (int64_t{1} << 32)));
        });
      }));
  cases.push_back(make_case(
      "-i32 min wraps", {fixed({4}, i32, extremes)}, [](const Ts& t) { return -t[0]; },
      [wrap32](const Rs& r) { return map1(r[0], i32, [&](double a) { return wrap32(-a); }); }));
  cases.push_back(make_case(
      "pow(i32,0)", {fixed({4}, i32, {0, -3, 5, 1})}, [](const Ts& t) { return lt::pow(t[0], 0); },
      [](const Rs& r) { return map1(r[0], i32, [](double) { return 1.0; }); }));
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Unary, OpsTest, ::testing::ValuesIn(unary_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Binary, OpsTest, ::testing::ValuesIn(binary_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(ScalarOperand, OpsTest, ::testing::ValuesIn(scalar_operand_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Promotion, OpsTest, ::testing::ValuesIn(promotion_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Where, OpsTest, ::testing::ValuesIn(where_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(AstypeClone, OpsTest, ::testing::ValuesIn(astype_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Reduce, OpsTest, ::testing::ValuesIn(reduce_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Softmax, OpsTest, ::testing::ValuesIn(softmax_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Layout, OpsTest, ::testing::ValuesIn(layout_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Matmul, OpsTest, ::testing::ValuesIn(matmul_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Creation, OpsTest, ::testing::ValuesIn(creation_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Fusion, OpsTest, ::testing::ValuesIn(fusion_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Empty, OpsTest, ::testing::ValuesIn(empty_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Special, OpsTest, ::testing::ValuesIn(special_cases()), case_name);

// Rows whose values do not depend on special inputs, for the whole-table tests below.
std::vector<Case> all_rows() {
  std::vector<Case> all;
  for (auto* family :
       {unary_cases, binary_cases, scalar_operand_cases, promotion_cases, where_cases, astype_cases,
        reduce_cases, softmax_cases, layout_cases, matmul_cases, fusion_cases, empty_cases}) {
    std::vector<Case> cs = family();
    all.insert(all.end(), cs.begin(), cs.end());
  }
  return all;
}

// Python's // and % where a float64 detour fails: int64 beyond 2^53 exactly (against
// __int128 arithmetic), the rounding edges of floats (CPython's own results: 7.0 // 0.1 is
// 69.0, 7.0 % 0.1 is 0.09999999999999962), divisors of both signs, an integer divisor of 0
// (-1 and a, as XLA) and the most negative int64 over -1 (wraps, remainder 0).
TEST(OpsFloor, FloorDivideAndRemainderAreExactAndPythons) {
  const std::vector<int64_t> a = {(int64_t{1} << 62) + 7,
                                  -(int64_t{1} << 55) - 3,
                                  (int64_t{1} << 53) + 1,
                                  7,
                                  -7,
                                  7,
                                  -7,
                                  5,
                                  INT64_MIN};
  const std::vector<int64_t> b = {3, 3, 3, 2, 2, -2, -2, 0, -1};
  const auto n = static_cast<int64_t>(a.size());
  const std::vector<int64_t> q =
      lt::floor_divide(lt::tensor(a, {n}), lt::tensor(b, {n})).to_vector<int64_t>();
  const std::vector<int64_t> r =
      lt::remainder(lt::tensor(a, {n}), lt::tensor(b, {n})).to_vector<int64_t>();
  for (size_t i = 0; i + 2 < a.size(); ++i) {
    const __int128 x = a[i], y = b[i];
    __int128 fq = x / y;
    if (x % y != 0 && ((x < 0) != (y < 0))) --fq;
    EXPECT_EQ(q[i], static_cast<int64_t>(fq)) << a[i] << " // " << b[i];
    EXPECT_EQ(r[i], static_cast<int64_t>(x - fq * y)) << a[i] << " % " << b[i];
  }
  EXPECT_EQ(q[7], -1);
  EXPECT_EQ(r[7], 5);
  EXPECT_EQ(q[8], INT64_MIN);
  EXPECT_EQ(r[8], 0);
  const Tensor x = lt::tensor({7.0, -5.3, 7.0, 10000001.0, -7.5, 7.5, 1.0});
  const Tensor y = lt::tensor({0.1, 0.1, 0.1, -2.5, 2.0, -2.0, 0.0});
  const std::vector<double> fq = lt::floor_divide(x, y).to_vector<double>();
  const std::vector<double> fr = lt::remainder(x, y).to_vector<double>();
  const std::vector<double> want_q = {69.0, -53.0, 69.0, -4000001.0, -4.0, -4.0, INFINITY};
  const std::vector<double> want_r = {
      0.09999999999999962, 4.718447854656915e-16, 0.09999999999999962, -1.5, 0.5, -0.5};
  for (size_t i = 0; i < want_q.size(); ++i) EXPECT_EQ(fq[i], want_q[i]) << i;
  for (size_t i = 0; i < want_r.size(); ++i) EXPECT_DOUBLE_EQ(fr[i], want_r[i]) << i;
  EXPECT_TRUE(std::isnan(fr[6]));
  // d(a % b)/da = 1, d/db = -(a // b)
  Tensor p = lt::tensor({5.0, -3.5}).requires_grad_(), d = lt::tensor({2.0, 1.5}).requires_grad_();
  lt::sum(lt::remainder(p, d)).backward();
  EXPECT_EQ(p.grad().to_vector<double>(), (std::vector<double>{1, 1}));
  EXPECT_EQ(d.grad().to_vector<double>(), (std::vector<double>{-2, 3}));
}

// Every op kind of ir/ops.def is made by some row of the tables above (the kinds each row
// records are read off its graph), or is one the tables cannot make, listed here with the
// tests that cover it. A new op without a row fails here.
TEST(OpsRegistry, EveryOpKindHasARowOrIsListedWithItsTests) {
  std::set<lt_test::OpKind> recorded;
  for (auto* family : {unary_cases, binary_cases, scalar_operand_cases, promotion_cases,
                       where_cases, astype_cases, reduce_cases, softmax_cases, layout_cases,
                       matmul_cases, creation_cases, fusion_cases, empty_cases, special_cases})
    for (const Case& c : family()) lt_test::collect_ops(build(c).got, recorded);
  using K = lt_test::OpKind;
  const std::map<K, const char*> elsewhere = {
      {K::RandUniform, "OpsRandom (uniform on [0, 1), reproducible seeds)"},
      {K::RandNormal, "OpsRandom (standard normal)"},
      {K::Param, "assume_pure_test, scan_test (the inputs of traced bodies)"},
      {K::Call, "assume_pure_test, compile_test"},
      {K::CallResult, "assume_pure_test, scan_test"},
      {K::Pack, "assume_pure_test"},
      {K::Loop, "scan_test, loops_test (scan, while_loop, fori_loop)"},
      {K::AdamW, "nn_test (AdamWFused, Optim.*AdamW*: against a plain loop)"},
      {K::AdamWProduct,
       "nn_test (Optim.AdamWComputesAProductGradientBesideTheUpdate; "
       "the compiler makes it from AdamW)"},
      {K::CheckTargets, "nn_test (Losses.CrossEntropy*: targets in range, out of range)"},
      {K::AllReduce, "dist_test (Collectives.*: against loops over 1 to 4 thread ranks)"},
      {K::ReduceScatter, "dist_test (Collectives.*), mpi_train under mpirun"},
      {K::AllGather, "dist_test (Collectives.*), mpi_train under mpirun"},
      {K::Broadcast, "dist_test (Collectives.*), data_parallel_test"},
  };
  lt_test::expect_covered(recorded, elsewhere, {},
                          "ops_test row: add one to a table above (and, if it is "
                          "differentiable, a case to autograd_test.cpp's grad_cases)");
}

// Every row recorded first and computed by one lt::sync(): one large graph with many
// results, which exercises fusion across rows, common-subexpression merging and the
// arena plan far more than one row at a time.
TEST(OpsGraph, AllRowsInOneSync) {
  const std::vector<Case> all = all_rows();
  std::vector<Built> built;
  built.reserve(all.size());
  for (const Case& c : all) built.push_back(build(c, 1));
  lt::sync();
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(all[i].name);
    EXPECT_FALSE(built[i].got.is_pending());
    expect_matches(built[i].got, built[i].want, all[i].tol_scale);
  }
}

// Each row's graph run twice on new input values: the second run is a compile-cache hit
// that must bind the new buffers and scalars, and must not touch the first run's results.
TEST(OpsGraph, CachedProgramsSeeNewData) {
  const std::vector<Case> all = all_rows();
  std::vector<Built> first, second;
  for (const Case& c : all) {
    first.push_back(build(c, 2));
    lt::sync({first.back().got});
  }
  for (const Case& c : all) {
    second.push_back(build(c, 3));
    lt::sync({second.back().got});
  }
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(all[i].name);
    expect_matches(first[i].got, first[i].want, all[i].tol_scale);
    expect_matches(second[i].got, second[i].want, all[i].tol_scale);
  }
}

// ------------------------------------------------------------------------------ random

struct Stats {
  double mean, stddev, min, max;
};

Stats stats_of(const Values& v) {
  double s = 0, s2 = 0;
  for (double x : v) s += x;
  const double mean = s / static_cast<double>(v.size());
  for (double x : v) s2 += (x - mean) * (x - mean);
  return {mean, std::sqrt(s2 / static_cast<double>(v.size())),
          *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

TEST(OpsRandom, RandIsUniformOnZeroToOne) {
  for (DType d : kFloatDTypes) {
    SCOPED_TRACE(short_name(d));
    lt::manual_seed(1234);
    Tensor t = lt::rand({100000}, d);
    ASSERT_EQ(t.dtype(), d);
    const Values v = t.to_vector<double>();
    const Stats s = stats_of(v);
    EXPECT_GE(s.min, 0.0);
    EXPECT_LT(s.max, 1.0) << "rand must draw from [0, 1)";
    EXPECT_NEAR(s.mean, 0.5, 0.01);
    EXPECT_NEAR(s.stddev, std::sqrt(1.0 / 12), 0.01);
    // every tenth of the interval gets its share
    std::vector<int> bins(10, 0);
    for (double x : v) ++bins[static_cast<size_t>(std::clamp(x * 10, 0.0, 9.0))];
    for (int b : bins) EXPECT_NEAR(b, 10000, 600);
  }
}

TEST(OpsRandom, RandnIsStandardNormal) {
  for (DType d : kFloatDTypes) {
    SCOPED_TRACE(short_name(d));
    lt::manual_seed(99);
    Tensor t = lt::randn({400, 250}, d);
    ASSERT_EQ(t.dtype(), d);
    ASSERT_EQ(t.shape().vec(), (Dims{400, 250}));
    const Values v = t.to_vector<double>();
    const Stats s = stats_of(v);
    EXPECT_NEAR(s.mean, 0.0, 0.02);
    EXPECT_NEAR(s.stddev, 1.0, 0.02);
    size_t within1 = 0;
    for (double x : v) within1 += std::fabs(x) < 1;
    EXPECT_NEAR(static_cast<double>(within1) / static_cast<double>(v.size()), 0.6827, 0.01);
  }
}

TEST(OpsRandom, SeedsAreReproducible) {
  lt::manual_seed(7);
  const Values a = lt::rand({1000}).to_vector<double>();
  const Values b = lt::randn({1000}, f64).to_vector<double>();
  const Values c = lt::rand({1000}).to_vector<double>();
  EXPECT_NE(c, a) << "the next draw continues the stream";
  lt::manual_seed(7);
  EXPECT_EQ(lt::rand({1000}).to_vector<double>(), a) << "same seed, same numbers";
  EXPECT_EQ(lt::randn({1000}, f64).to_vector<double>(), b);
  EXPECT_EQ(lt::rand({1000}).to_vector<double>(), c);
  lt::manual_seed(8);
  EXPECT_NE(lt::rand({1000}).to_vector<double>(), a) << "a different seed, different numbers";
  // the same draws recorded together and computed by one sync
  lt::manual_seed(7);
  Tensor x = lt::rand({1000}), y = lt::randn({1000}, f64), z = lt::rand({1000});
  lt::sync();
  EXPECT_EQ(x.to_vector<double>(), a);
  EXPECT_EQ(y.to_vector<double>(), b);
  EXPECT_EQ(z.to_vector<double>(), c);
}

// Integers beyond 2^53 do not survive a trip through double: read them as int64.
TEST(OpsInt64, LargeValuesStayExact) {
  const int64_t big = (int64_t{1} << 53) + 1;
  const Tensor x = lt::tensor(std::vector<int64_t>{big, -big, 3}, lt::Shape{3});
  EXPECT_EQ((x + 2).to_vector<int64_t>(), (std::vector<int64_t>{big + 2, -big + 2, 5}));
  EXPECT_EQ((x + big).to_vector<int64_t>(), (std::vector<int64_t>{2 * big, 0, big + 3}));
  EXPECT_EQ((x * 2).to_vector<int64_t>(), (std::vector<int64_t>{2 * big, -2 * big, 6}));
  EXPECT_EQ(lt::sum(x).item<int64_t>(), 3);
  EXPECT_EQ(lt::amax(x).item<int64_t>(), big);
  EXPECT_EQ(lt::full({2}, big, i64).to_vector<int64_t>(), (std::vector<int64_t>{big, big}));
  EXPECT_EQ(lt::scalar(big).item<int64_t>(), big);
  EXPECT_EQ((x == big).to_vector<bool>(), (std::vector<bool>{true, false, false}));
  EXPECT_EQ((x == big - 1).to_vector<bool>(), (std::vector<bool>{false, false, false}));
  EXPECT_EQ(lt::index_select(x, 0, lt::tensor({1, 0})).to_vector<int64_t>(),
            (std::vector<int64_t>{-big, big}));
  EXPECT_EQ(lt::matmul(x, lt::tensor({1, 1, 0})).item<int64_t>(), 0);
}

// Reductions over contiguous rows of every length around the kernel's four partial results,
// against a plain loop in float64: a NaN anywhere in a row makes its max NaN, wherever it
// falls among the partials; -inf rows stay -inf; sums and means match.
TEST(OpsReduce, ContiguousRowsOfEveryLengthMatchAPlainLoop) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n = 1; n <= 11; ++n) {
    const int64_t rows = n + 2;  // row r holds its NaN at r - 2 (none in rows 0 and 1)
    std::vector<float> v(static_cast<size_t>(rows * n));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) {
        float x = static_cast<float>((r * 7 + j * 3) % 11) - 5.5f;
        if (r == 1) x = -inf;
        if (r >= 2 && j == r - 2) x = nan;
        v[static_cast<size_t>(r * n + j)] = x;
      }
    const Tensor t = lt::tensor(v, lt::Shape{rows, n});
    const std::vector<float> mx = lt::amax(t, {1}).to_vector<float>();
    const std::vector<float> sm = lt::sum(t, {1}).to_vector<float>();
    const std::vector<float> mn = lt::mean(t, {1}).to_vector<float>();
    for (int64_t r = 0; r < rows; ++r) {
      double m = -std::numeric_limits<double>::infinity(), s = 0;
      bool has_nan = false;
      for (int64_t j = 0; j < n; ++j) {
        const double x = v[static_cast<size_t>(r * n + j)];
        has_nan = has_nan || std::isnan(x);
        m = std::max(m, x);
        s += x;
      }
      const auto i = static_cast<size_t>(r);
      if (has_nan) {
        EXPECT_TRUE(std::isnan(mx[i])) << "n " << n << " row " << r;
        EXPECT_TRUE(std::isnan(sm[i])) << "n " << n << " row " << r;
        continue;
      }
      EXPECT_EQ(mx[i], static_cast<float>(m)) << "n " << n << " row " << r;
      EXPECT_EQ(sm[i], static_cast<float>(s)) << "n " << n << " row " << r;
      EXPECT_FLOAT_EQ(mn[i], static_cast<float>(s / static_cast<double>(n)))
          << "n " << n << " row " << r;
    }
  }
}

// Long reductions to a few values (a whole tensor summed, a gradient's norm): the rows, their
// dims merged where memory is one run, are shared out in fixed chunks, each summed on its own
// and combined in order. Against a float64 loop: sums, means, amax (a NaN in the last chunk
// makes it NaN), a bfloat16 tensor, and a transposed view, whose dims do not merge.
TEST(OpsReduce, LongReductionsToFewValuesMatchAPlainLoop) {
  const int64_t rows = 300, cols = 1001;  // 300,300 values: ten chunks and a part
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(static_cast<int64_t>(i * 2654435761u % 2001) - 1000) / 97.0f;
  const Tensor t = lt::tensor(v, lt::Shape{rows, cols});
  double s = 0, m = -1e300;
  for (float x : v) {
    s += x;
    m = std::max(m, static_cast<double>(x));
  }
  EXPECT_NEAR(lt::sum(t).item<double>(), s, 1e-6 * std::abs(s) + 1e-3);
  EXPECT_NEAR(lt::mean(t).item<double>(), s / static_cast<double>(v.size()), 1e-6);
  EXPECT_EQ(lt::amax(t).item<double>(), static_cast<float>(m));
  EXPECT_NEAR(lt::sum(lt::transpose(t, 0, 1)).item<double>(), s, 1e-6 * std::abs(s) + 1e-3);
  // one output per row of two: each row in chunks
  const std::vector<float> halves = lt::sum(lt::reshape(t, {2, -1}), {1}).to_vector<float>();
  double h0 = 0;
  for (size_t i = 0; i < v.size() / 2; ++i) h0 += v[i];
  EXPECT_NEAR(halves[0], h0, 1e-6 * std::abs(h0) + 1e-3);
  EXPECT_NEAR(halves[0] + halves[1], s, 1e-5 * std::abs(s) + 1e-2);
  // bfloat16: widened in blocks, summed in float64, rounded once
  const Tensor b = lt::astype(t, lt::bfloat16);
  double sb = 0;
  for (float x : lt::astype(b, lt::float32).to_vector<float>()) sb += x;
  EXPECT_EQ(lt::sum(b).dtype(), lt::bfloat16);
  EXPECT_EQ(lt::astype(lt::sum(b), lt::float32).item<float>(),
            static_cast<float>(lt::BFloat16(static_cast<float>(sb))));
  // the same bits whether a long row is shared out (fewer rows than threads) or summed on one
  // thread beside other rows: values whose sum depends on the order (found in review: 1 on
  // one thread, 0 on two)
  std::vector<float> tricky(3 * 70000, 0.0f);
  for (int r = 0; r < 3; ++r) {
    tricky[static_cast<size_t>(r * 70000)] = 0x1p60f;
    tricky[static_cast<size_t>(r * 70000 + 32768)] = -0x1p60f;
    tricky[static_cast<size_t>(r * 70000 + 33024)] = 1.0f;
  }
  const Tensor rows3 = lt::tensor(tricky, lt::Shape{3, 70000});
  const float one_row = lt::sum(lt::slice(rows3, 0, 0, 1)).item<float>();
  for (float x : lt::sum(rows3, {1}).to_vector<float>()) EXPECT_EQ(x, one_row);
  for (float x : lt::sum(lt::slice(rows3, 0, 0, 2), {1}).to_vector<float>()) EXPECT_EQ(x, one_row);
  // a NaN in the last chunk
  std::vector<float> w = v;
  w.back() = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(lt::amax(lt::tensor(w, lt::Shape{rows, cols})).item<float>()));
  EXPECT_TRUE(std::isnan(lt::sum(lt::tensor(w, lt::Shape{rows, cols})).item<float>()));
}

// ---------------------------------------------------------------------------- read-back

// to_vector<T> and item<T> convert as astype does: the harness reads every result this way.
TEST(OpsReadBack, ConvertsLikeAstype) {
  const Tensor x = lt::tensor(std::vector<double>{1e-50, 0.0, -2.75, 3e9}, lt::Shape{4});
  EXPECT_EQ(x.to_vector<bool>(), lt::astype(x, boolean).to_vector<bool>());
  EXPECT_EQ(x.to_vector<bool>(), (std::vector<bool>{true, false, true, true}));
  EXPECT_TRUE(lt::select(x, 0, 0).item<bool>()) << "a tiny float64 is non-zero";
  EXPECT_TRUE(static_cast<bool>(lt::scalar(1e-50)));
  EXPECT_EQ(lt::slice(x, 0, 0, 3).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, -2}));
  EXPECT_EQ(x.to_vector<float>()[3], 3e9f);
  const Tensor h = lt::astype(lt::tensor({0.1f, -65504.f}), f16);
  EXPECT_EQ(h.to_vector<double>(), (Values{0.0999755859375, -65504}));
}

// ------------------------------------------------------------------------------ errors

TEST(OpsErrors, RejectedInputsThrowLtError) {
  const Tensor f = lt::ones({2, 3}), b = lt::ones({2, 3}, boolean), i = lt::ones({2, 3}, i32);
  struct Row {
    const char* name;
    std::function<void()> run;
  };
  const Row rows[] = {
      {"bool - bool", [&] { (void)(b - b); }},
      {"pow(bool, bool)", [&] { (void)lt::pow(b, b); }},
      {"neg(bool)", [&] { (void)lt::neg(b); }},
      {"abs(bool)", [&] { (void)lt::abs(b); }},
      {"relu(bool)", [&] { (void)lt::relu(b); }},
      {"mean(i32)", [&] { (void)lt::mean(i); }},
      {"softmax(i32)", [&] { (void)lt::softmax(i); }},
      {"log_softmax(bool)", [&] { (void)lt::log_softmax(b); }},
      {"matmul(bool)", [&] { (void)lt::matmul(b, lt::transpose(b)); }},
      {"matmul [2,3]x[2,3]", [&] { (void)lt::matmul(f, f); }},
      {"matmul 0-d", [&] { (void)lt::matmul(lt::scalar(1.0), f); }},
      {"where(f32 cond)", [&] { (void)lt::where(f, f, f); }},
      {"add [2,3]+[2]", [&] { (void)(f + lt::ones({2})); }},
      {"reshape [2,3]->[4]", [&] { (void)lt::reshape(f, {4}); }},
      {"reshape two -1",
       [&] {
         (void)lt::reshape(f, {-1, -1});
       }},
      {"transpose dim 2", [&] { (void)lt::transpose(f, 0, 2); }},
      {"permute repeated",
       [&] {
         (void)lt::permute(f, {0, 0});
       }},
      {"broadcast_to [3,3]",
       [&] {
         (void)lt::broadcast_to(f, {3, 3});
       }},
      {"slice step 0", [&] { (void)lt::slice(f, 0, 0, 2, 0); }},
      {"select out of range", [&] { (void)lt::select(f, 1, 3); }},
      {"squeeze size 3", [&] { (void)lt::squeeze(f, 1); }},
      {"unsqueeze dim 4", [&] { (void)lt::unsqueeze(f, 4); }},
      {"concat mismatched",
       [&] {
         (void)lt::concat({f, lt::ones({2, 2})}, 0);
       }},
      {"concat empty list", [&] { (void)lt::concat({}, 0); }},
      {"stack mismatched",
       [&] {
         (void)lt::stack({f, lt::ones({3, 2})}, 0);
       }},
      {"index_select f32 index", [&] { (void)lt::index_select(f, 0, lt::ones({2})); }},
      {"index_select 2-d index",
       [&] {
         (void)lt::index_select(f, 0, lt::zeros({1, 1}, i64));
       }},
      {"sum repeated dim",
       [&] {
         (void)lt::sum(f, {0, -2});
       }},
      {"amax dim 2", [&] { (void)lt::amax(f, {2}); }},
      {"arange step 0", [] { (void)lt::arange(0, 5, 0); }},
      {"arange empty", [] { (void)lt::arange(5, 0, 1); }},
      {"arange bool", [] { (void)lt::arange(0, 5, 1, boolean); }},
      {"rand i32", [] { (void)lt::rand({2}, i32); }},
      {"zeros negative", [] { (void)lt::zeros({-1}); }},
      {"tensor wrong count",
       [] {
         (void)lt::tensor(std::vector<float>{1, 2}, {3});
       }},
      {"undefined tensor", [&] { (void)(Tensor() + f); }},
      // checked when the graph runs
      {"index_select index 5 of 2",
       [&] { (void)lt::index_select(f, 0, lt::tensor({5})).to_vector<float>(); }},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    EXPECT_THROW(r.run(), lt::Error);
  }
}

}  // namespace

namespace {

// Tensors of more than 6 dims (the fixed-size fast paths hold up to 6): a permute, a
// broadcast product and a reduction over three dims of a 7-d tensor, against plain loops.
// A floating tensor to the power 2, 3, -1, -2, 0.5 or -0.5 is multiplied, divided or
// square-rooted instead of a general power (as PyTorch does): the values of std::pow in
// double within a few float ulps, sqrt's values at -0 and -inf, and gradients e x^(e - 1).
TEST(OpsPow, SmallExponentsAreProductsAndRootsWithPowsValues) {
  std::vector<float> xs;
  for (int i = 0; i < 400; ++i)
    xs.push_back(
        static_cast<float>(std::ldexp(1.0 + i % 37 / 37.0, i % 41 - 20) * (i % 2 ? -1 : 1)));
  for (double e : {2.0, 3.0, -1.0, -2.0, 0.5, -0.5}) {
    std::vector<float> in = xs;
    if (e == 0.5 || e == -0.5)
      for (float& v : in) v = std::fabs(v);
    Tensor x = lt::tensor(in, {static_cast<int64_t>(in.size())});
    x.requires_grad_(true);
    Tensor y = lt::pow(x, e);
    EXPECT_EQ(lt::debug::to_text({y}).find("pow("), std::string::npos) << e;
    lt::sum(y).backward();
    const std::vector<float> got = y.to_vector<float>(), grad = x.grad().to_vector<float>();
    for (size_t i = 0; i < in.size(); ++i) {
      const double want = std::pow(static_cast<double>(in[i]), e);
      EXPECT_NEAR(got[i], want, 4e-7 * std::fabs(want)) << "x = " << in[i] << ", e = " << e;
      const double slope = e * std::pow(static_cast<double>(in[i]), e - 1);
      EXPECT_NEAR(grad[i], slope, 1e-6 * std::fabs(slope)) << "x = " << in[i] << ", e = " << e;
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special =
      lt::pow(lt::tensor({-0.0f, -inf, inf, 0.0f}), 0.5).to_vector<float>();
  EXPECT_TRUE(std::signbit(special[0]) && special[0] == 0);  // sqrt(-0) = -0
  EXPECT_TRUE(std::isnan(special[1]));
  EXPECT_EQ(special[2], inf);
  EXPECT_EQ(special[3], 0.0f);
  // an integer tensor keeps integer powers, a general exponent stays a power
  EXPECT_EQ(lt::pow(lt::tensor({-3, 2}), 2).to_vector<int64_t>(), (std::vector<int64_t>{9, 4}));
  EXPECT_NE(lt::debug::to_text({lt::pow(lt::tensor({1.5f}), 2.5)}).find("pow("), std::string::npos);
}

TEST(OpsHighRank, SevenAndEightDimsMatchLoops) {
  const std::vector<int64_t> dims = {2, 3, 1, 2, 3, 2, 2};
  const int64_t n = 2 * 3 * 1 * 2 * 3 * 2 * 2;
  std::vector<double> xs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) xs[static_cast<size_t>(i)] = std::sin(0.7 * i) + 0.1 * i;
  lt::Tensor x = lt::tensor(xs, lt::Shape(dims));
  // strides of the input
  std::vector<int64_t> st(7, 1);
  for (int d = 5; d >= 0; --d) st[d] = st[d + 1] * dims[d + 1];
  const std::vector<int> perm = {6, 0, 5, 1, 4, 2, 3};
  lt::Tensor p = lt::permute(x, perm);
  lt::Tensor w = lt::tensor(std::vector<double>{1.5, -2.0}, {2, 1, 1, 1, 1, 1, 1});  // dim 0
  lt::Tensor y = lt::sum(p * w, {1, 3, 5});  // over input dims 0, 1, 2
  const std::vector<double> got = y.to_vector<double>();
  // y[a, b, c, d] = sum over i0, i1, i2 of x[i0, i1, i2, d, c, b, a] * w[a]
  ASSERT_EQ(y.shape(), lt::Shape({2, 2, 3, 2}));
  size_t k = 0;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t d = 0; d < 2; ++d, ++k) {
          double want = 0;
          for (int64_t i0 = 0; i0 < 2; ++i0)
            for (int64_t i1 = 0; i1 < 3; ++i1)
              want += xs[static_cast<size_t>(i0 * st[0] + i1 * st[1] + d * st[3] + c * st[4] +
                                             b * st[5] + a * st[6])] *
                      (a == 0 ? 1.5 : -2.0);
          EXPECT_NEAR(got[k], want, 1e-12) << a << b << c << d;
        }
  // eight dims: a reshape round trip and a broadcast add keep every element
  lt::Tensor e =
      lt::reshape(x, {2, 3, 1, 2, 3, 2, 2, 1}) + lt::zeros({1, 1, 1, 1, 1, 1, 1, 3}, lt::float64);
  ASSERT_EQ(e.ndim(), 8);
  const std::vector<double> ev = e.to_vector<double>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_EQ(ev[static_cast<size_t>(i * 3 + j)], xs[static_cast<size_t>(i)]);
}

}  // namespace

namespace {

// Distance in float32 ulps between got and the double reference rounded to float32.
double ulps(float got, double want) {
  const float w = static_cast<float>(want);
  if (got == w) return 0;
  if (std::isnan(got) || std::isnan(w)) return 1e9;
  const float ulp = std::nextafter(std::fabs(w), INFINITY) - std::fabs(w);
  return std::fabs(static_cast<double>(got) - static_cast<double>(w)) / ulp;
}

struct UlpCase {
  const char* name;
  lt::Tensor (*op)(const lt::Tensor&);
  double (*ref)(double);
  double lo, hi;
  double budget;  // the most ulps allowed: the kernels' measured worst case (every ISA copy
                  // computes the same bits)
};

// The sign of a zero result, as libm gives it: an odd function keeps -0 (tanh(-0) was +0:
// its polynomial adds x's -0 to a +0 term).
TEST(OpsUlp, Float32FunctionsGiveLibmsSignedZeros) {
  struct Case {
    const char* name;
    lt::Tensor (*op)(const lt::Tensor&);
    double (*ref)(double);
  };
  const Case cases[] = {
      {"tanh", lt::tanh, [](double x) { return std::tanh(x); }},
      {"erf", lt::erf, [](double x) { return std::erf(x); }},
      {"sin", lt::sin, [](double x) { return std::sin(x); }},
      {"log1p", lt::log1p, [](double x) { return std::log1p(x); }},
      {"sqrt", lt::sqrt, [](double x) { return std::sqrt(x); }},
      {"abs", lt::abs, [](double x) { return std::fabs(x); }},
      {"gelu", lt::gelu, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
      {"silu", lt::silu, [](double x) { return x / (1 + std::exp(-x)); }},
  };
  // 40 floats: the step runs whole vectors, and the ISA copies' tails, on the zeros
  std::vector<float> xs(40);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = i % 2 ? 0.0f : -0.0f;
  for (const Case& c : cases) {
    const std::vector<float> got = c.op(lt::tensor(xs, {40})).to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i) {
      const double want = c.ref(xs[i]);
      EXPECT_EQ(got[i], 0.0f) << c.name << "(" << xs[i] << ")";
      EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << c.name << "(" << xs[i] << ")";
    }
  }
}

// Every float32 transcendental over 200,001 inputs across its domain, against libm in
// double: an accuracy regression of even one ulp fails (float32's tolerance in the table,
// 1e-5, is about 80 ulps). The ops_test.baseline and .avx2 runs hold the other copies to
// the same budgets.
TEST(OpsUlp, Float32TranscendentalsStayWithinTheirUlpBudget) {
  const UlpCase cases[] = {
      {"exp", lt::exp, [](double x) { return std::exp(x); }, -80, 80, 1},
      {"exp near its overflow", lt::exp, [](double x) { return std::exp(x); }, 80, 88.72, 1},
      {"exp near its underflow", lt::exp, [](double x) { return std::exp(x); }, -87.33, -80, 1},
      {"log", lt::log, [](double x) { return std::log(x); }, 1e-30, 1e30, 1},
      {"log1p", lt::log1p, [](double x) { return std::log1p(x); }, -0.999, 1e6, 1},
      {"sin", lt::sin, [](double x) { return std::sin(x); }, -100, 100, 1},
      {"cos", lt::cos, [](double x) { return std::cos(x); }, -100, 100, 1},
      {"tanh", lt::tanh, [](double x) { return std::tanh(x); }, -10, 10, 1},
      {"sigmoid", lt::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -80, 80, 2},
      {"erf", lt::erf, [](double x) { return std::erf(x); }, -6, 6, 1},
      {"sqrt", lt::sqrt, [](double x) { return std::sqrt(x); }, 0, 1e30, 0},
      {"rsqrt", lt::rsqrt, [](double x) { return 1 / std::sqrt(x); }, 1e-30, 1e30, 1},
  };
  const int n = 200001;
  for (const UlpCase& c : cases) {
    std::vector<float> xs(n);
    // half the points evenly spaced, half spaced in magnitude (log scale) for wide domains
    for (int i = 0; i < n; ++i) {
      const double t = static_cast<double>(i) / (n - 1);
      double x = c.lo + (c.hi - c.lo) * t;
      if (i % 2 && c.lo > 0) x = c.lo * std::pow(c.hi / c.lo, t);
      xs[static_cast<size_t>(i)] = static_cast<float>(x);
    }
    const std::vector<float> got = c.op(lt::tensor(xs, {n})).to_vector<float>();
    double worst = 0;
    float at = 0;
    for (int i = 0; i < n; ++i) {
      const double u = ulps(got[static_cast<size_t>(i)], c.ref(xs[static_cast<size_t>(i)]));
      if (u > worst) {
        worst = u;
        at = xs[static_cast<size_t>(i)];
      }
    }
    EXPECT_LE(worst, c.budget) << c.name << ": " << worst << " ulps at x = " << at;
  }
}

}  // namespace
