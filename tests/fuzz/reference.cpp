// The reference interpreter (see reference.h).
#include "reference.h"

#include <lazytrace/core/half.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <random>

namespace fuzz {

using lazytrace::BFloat16;
using lazytrace::Half;

double weighted_sum(const Program& p, const RefResult& r,
                    const std::vector<std::vector<double>>& w) {
  double l = 0;
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const RTensor& t = r.nodes[static_cast<size_t>(p.outputs[k])];
    if (!floating(t.dtype)) continue;
    for (size_t i = 0; i < t.v.size(); ++i) l += t.v[i] * w[k][i];
  }
  return l;
}

double round_to(DType d, double v) {
  switch (d) {
    case DType::float32:
      return static_cast<double>(static_cast<float>(v));
    case DType::float64:
      return v;
    case DType::float16:
      return static_cast<double>(static_cast<float>(Half(static_cast<float>(v))));
    case DType::bfloat16:
      return static_cast<double>(static_cast<float>(BFloat16(static_cast<float>(v))));
    case DType::int32:
      return static_cast<double>(static_cast<int32_t>(static_cast<int64_t>(v)));
    case DType::int64:
      return static_cast<double>(static_cast<int64_t>(v));
    case DType::bool_:
      return v != 0 ? 1 : 0;
  }
  return v;
}

namespace {

constexpr double kDecide = 4;  // an undecidable comparison: operands within 4x their error

double ulp_of(DType d) {
  switch (d) {
    case DType::float32:
      return std::ldexp(1.0, -24);
    case DType::float64:
      return std::ldexp(1.0, -53);
    case DType::float16:
      return std::ldexp(1.0, -11);
    case DType::bfloat16:
      return std::ldexp(1.0, -8);
    case DType::int32:
    case DType::int64:
    case DType::bool_:
      return 0;
  }
  return 0;
}
double tiny_of(DType d) {
  switch (d) {
    case DType::float32:
      return std::ldexp(1.0, -149);
    case DType::float16:
      return std::ldexp(1.0, -24);
    case DType::bfloat16:
      return std::ldexp(1.0, -133);
    case DType::float64:
    case DType::int32:
    case DType::int64:
    case DType::bool_:
      return 0;
  }
  return 0;
}
int mantissa_of(DType d) {
  switch (d) {
    case DType::float32:
      return 24;
    case DType::float64:
      return 53;
    case DType::float16:
      return 11;
    case DType::bfloat16:
      return 8;
    case DType::int32:
    case DType::int64:
    case DType::bool_:
      return 64;
  }
  return 53;
}
DType compute_of(DType d) {
  if (d == DType::float64) return DType::float64;
  if (floating(d)) return DType::float32;
  return DType::int64;
}

std::vector<int64_t> strides_of(const Dims& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

void unravel(int64_t flat, const Dims& s, std::vector<int64_t>& idx) {
  idx.assign(s.size(), 0);
  for (size_t i = s.size(); i-- > 0;) {
    idx[i] = s[i] ? flat % s[i] : 0;
    flat = s[i] ? flat / s[i] : 0;
  }
}

RTensor make(DType d, const Dims& s) {
  RTensor t;
  t.dtype = d;
  t.shape = s;
  const auto n = static_cast<size_t>(numel(s));
  t.v.assign(n, 0);
  t.e.assign(n, 0);
  t.u.assign(n, 0);
  return t;
}

// Broadcast strides of `in` against output shape `out` (0 on broadcast dims).
std::vector<int64_t> bstrides(const Dims& in, const Dims& out) {
  std::vector<int64_t> st = strides_of(in), r(out.size(), 0);
  const size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) r[off + i] = in[i] == 1 ? 0 : st[i];
  return r;
}

struct Ctx {
  const DataSet& data;
  bool round;
  const std::vector<RTensor>* params = nullptr;
  const std::vector<RTensor>* outer = nullptr;
  double static_value = 0;
  bool* ok;
  std::string* why;
  void fail(const std::string& s) {
    if (*ok) *why = s;
    *ok = false;
  }
};

class Eval {
 public:
  explicit Eval(Ctx& c) : c_(c) {}

  double R(DType d, double v) const { return c_.round ? round_to(d, v) : v; }

  // The final value and error of a result r of dtype d: `prop` the error carried in from
  // the operands, `imp` the ulps (of the compute type) lazytrace's own function may differ.
  void fin(RTensor& t, size_t i, double r, double prop, double imp) {
    const DType d = t.dtype;
    const double rv = R(d, r);
    t.v[i] = rv;
    if (!c_.round) {
      t.e[i] = 0;
    } else if (!floating(d) || (prop == 0 && imp == 0)) {
      t.e[i] = prop;
    } else {
      if (!std::isfinite(prop)) prop = 1e300;
      t.e[i] =
          prop + imp * ulp_of(compute_of(d)) * std::abs(r) + ulp_of(d) * std::abs(rv) + tiny_of(d);
      // lazytrace's own float32 functions (exp_f32, tanh_f32, ...) may flush a subnormal
      // result to 0
      if (imp > 0 && compute_of(d) == DType::float32) t.e[i] += std::ldexp(1.0, -126);
    }
  }

  // Operand x cast to dtype d (the common dtype of an op), as lazytrace's node_as does.
  RTensor cast(const RTensor& x, DType d) {
    if (x.dtype == d) return x;
    RTensor t = make(d, x.shape);
    for (size_t i = 0; i < x.v.size(); ++i) {
      const double v = x.v[i], e = x.e[i];
      t.u[i] = x.u[i];
      if (d == DType::bool_) {
        t.v[i] = v != 0;
        if (e > 0 && std::abs(v) <= kDecide * e) t.u[i] = 1;
        continue;
      }
      if (integral(d) && floating(x.dtype)) {
        const double tr = std::trunc(v);
        if (!(std::abs(tr) < 9e18)) {
          c_.fail("cast of " + std::to_string(v) + " to an integer is out of range");
          return t;
        }
        if (e > 0 && std::trunc(v - kDecide * e) != std::trunc(v + kDecide * e)) t.u[i] = 1;
        if (d == DType::int32 && std::abs(tr) > 2147483647.0) {
          c_.fail("cast to int32 out of range");
          return t;
        }
        t.v[i] = c_.round ? round_to(d, tr) : tr;
        continue;
      }
      if (d == DType::float16 && std::abs(static_cast<float>(v)) > 65504) {
        c_.fail("cast to float16 overflows");
        return t;
      }
      fin(t, i, v, e, 0);
      if (!floating(x.dtype) && floating(d)) t.e[i] = 0;  // integers convert exactly here
      if (floating(d) && floating(x.dtype) && e == 0) t.e[i] = 0;
    }
    return t;
  }

  // Elementwise over broadcast operands (already in their computing dtype).
  RTensor elementwise(DType out, const std::vector<const RTensor*>& ins,
                      const std::function<void(RTensor&, size_t, const std::vector<size_t>&)>& f) {
    Dims shape = ins[0]->shape;
    for (size_t k = 1; k < ins.size(); ++k) shape = bshape(shape, ins[k]->shape);
    RTensor t = make(out, shape);
    std::vector<std::vector<int64_t>> st;
    for (const RTensor* x : ins) st.push_back(bstrides(x->shape, shape));
    std::vector<int64_t> idx;
    std::vector<size_t> at(ins.size());
    for (int64_t o = 0; o < numel(shape); ++o) {
      unravel(o, shape, idx);
      for (size_t k = 0; k < ins.size(); ++k) {
        int64_t a = 0;
        for (size_t j = 0; j < idx.size(); ++j) a += idx[j] * st[k][j];
        at[k] = static_cast<size_t>(a);
      }
      const auto oi = static_cast<size_t>(o);
      for (size_t k = 0; k < ins.size(); ++k) t.u[oi] |= ins[k]->u[at[k]];
      f(t, oi, at);
    }
    return t;
  }

  static Dims bshape(const Dims& a, const Dims& b) {
    const size_t n = std::max(a.size(), b.size());
    Dims out(n, 1);
    for (size_t i = 0; i < n; ++i) {
      const int64_t ia = static_cast<int64_t>(a.size() + i) - static_cast<int64_t>(n);
      const int64_t ib = static_cast<int64_t>(b.size() + i) - static_cast<int64_t>(n);
      const int64_t da = ia >= 0 ? a[static_cast<size_t>(ia)] : 1;
      const int64_t db = ib >= 0 ? b[static_cast<size_t>(ib)] : 1;
      out[i] = da == 1 ? db : da;
    }
    return out;
  }

  void check_int(const RTensor& t, double raw, size_t) {
    if (t.dtype == DType::int32 && std::abs(raw) > 2147483647.0) c_.fail("int32 overflow");
    if (t.dtype == DType::int64 && std::abs(raw) > 9e15) c_.fail("int64 beyond exact doubles");
  }

  RTensor unary(UK k, const RTensor& x0, DType d) {
    RTensor x = cast(x0, d);
    return elementwise(d, {&x}, [&](RTensor& t, size_t i, const std::vector<size_t>& at) {
      const double v = x.v[at[0]], e = x.e[at[0]];
      double r = 0, der = 1, imp = 2;
      switch (k) {
        case UK::Neg:
          r = -v;
          imp = 0;
          break;
        case UK::Abs:
          r = std::abs(v);
          imp = 0;
          break;
        case UK::Relu:
          r = v > 0 ? v : 0;
          imp = 0;
          break;
        case UK::Exp:
          r = std::exp(v);
          der = r;
          imp = 4;
          break;
        case UK::Log:
          if (!(v > 0)) c_.fail("log of " + std::to_string(v));
          r = std::log(v);
          der = 1 / v;
          break;
        case UK::Log1p:
          if (!(v > -1)) c_.fail("log1p of " + std::to_string(v));
          r = std::log1p(v);
          der = 1 / (1 + v);
          break;
        case UK::Sin:
          r = std::sin(v);
          der = 1;
          break;
        case UK::Cos:
          r = std::cos(v);
          der = 1;
          break;
        case UK::Tanh:
          r = std::tanh(v);
          der = 1 - r * r;
          imp = 4;
          break;
        case UK::Sigmoid:
          r = 1 / (1 + std::exp(-v));
          der = r * (1 - r);
          imp = 4;
          break;
        case UK::Gelu: {
          r = 0.5 * v * (1 + std::erf(v * std::numbers::sqrt2 / 2));
          der = 1.13;
          imp = 0;
          // lazytrace's float32 gelu errs by ulps of |x| + |r| (near its zero, of x), carried
          // in as the operand's error is, so that a 16-bit result near a rounding boundary
          // may round either way
          fin(t, i, r,
              der * e + (c_.round ? 6 * ulp_of(compute_of(d)) * (std::abs(v) + std::abs(r)) : 0),
              0);
          return;
        }
        case UK::Silu:
          r = v / (1 + std::exp(-v));
          der = 1.1;
          imp = 6;
          break;
        case UK::Sqrt:
          if (!(v >= 0)) c_.fail("sqrt of " + std::to_string(v));
          r = std::sqrt(v);
          der = v > 0 ? 0.5 / r : 1e300;
          imp = 0;
          break;
        case UK::Rsqrt: {
          if (!(v > 0)) c_.fail("rsqrt of " + std::to_string(v));
          // as lazytrace computes it: 1 / sqrt(x), each rounded to the computing type
          const double s = R(compute_of(d), std::sqrt(v));
          r = 1 / s;
          der = 0.5 * r / v;
          imp = 0;
          break;
        }
        case UK::Erf:
          r = std::erf(v);
          der = 2 / std::sqrt(std::numbers::pi) * std::exp(-v * v);
          break;
        case UK::kCount:
          break;
      }
      if (integral(d)) {
        check_int(t, r, i);
        t.v[i] = R(d, r);
        return;
      }
      fin(t, i, r, der * e, imp);
    });
  }

  static double ipow(int64_t base, int64_t ex) {
    if (ex < 0) {
      if (base == 1) return 1;
      if (base == -1) return ex % 2 == 0 ? 1 : -1;
      return 0;
    }
    double r = 1;
    for (int64_t j = 0; j < ex; ++j) r *= static_cast<double>(base);
    return r;
  }

  RTensor binary(BK k, const RTensor& a0, const RTensor& b0, DType common, DType out) {
    RTensor a = cast(a0, common), b = cast(b0, common);
    return elementwise(out, {&a, &b}, [&](RTensor& t, size_t i, const std::vector<size_t>& at) {
      const double va = a.v[at[0]], vb = b.v[at[1]], ea = a.e[at[0]], eb = b.e[at[1]];
      if (is_compare(k)) {
        bool r = false;
        switch (k) {
          case BK::Eq:
            r = va == vb;
            break;
          case BK::Ne:
            r = va != vb;
            break;
          case BK::Lt:
            r = va < vb;
            break;
          case BK::Le:
            r = va <= vb;
            break;
          case BK::Gt:
            r = va > vb;
            break;
          case BK::Ge:
            r = va >= vb;
            break;
          case BK::Add:
          case BK::Sub:
          case BK::Mul:
          case BK::Div:
          case BK::Pow:
          case BK::Maximum:
          case BK::Minimum:
          case BK::Atan2:
          case BK::kCount:
            break;
        }
        t.v[i] = r;
        if (ea + eb > 0 && std::abs(va - vb) <= kDecide * (ea + eb)) t.u[i] = 1;
        return;
      }
      double r = 0, prop = 0, imp = 0;
      const bool ints = !floating(common);
      switch (k) {
        case BK::Add:
          r = common == DType::bool_ ? (va != 0 || vb != 0) : va + vb;
          prop = ea + eb;
          break;
        case BK::Sub:
          r = va - vb;
          prop = ea + eb;
          break;
        case BK::Mul:
          r = common == DType::bool_ ? (va != 0 && vb != 0) : va * vb;
          prop = std::abs(vb) * ea + std::abs(va) * eb;
          break;
        case BK::Div:
          if (vb == 0) c_.fail("division by 0");
          r = va / vb;
          prop = ea / std::abs(vb) + std::abs(va) * eb / (vb * vb);
          break;
        case BK::Pow:
          if (ints) {
            r = ipow(static_cast<int64_t>(va), static_cast<int64_t>(vb));
          } else {
            if (va < 0 && vb != std::floor(vb)) c_.fail("pow of a negative base");
            if (va == 0 && vb < 0) c_.fail("pow of 0 to a negative power");
            r = std::pow(va, vb);
            prop = std::abs(vb * std::pow(va, vb - 1)) * ea +
                   (va > 0 ? std::abs(r * std::log(va)) * eb : 0);
            imp = 2;
          }
          break;
        // IEEE 754-2019 maximum and minimum: -0 is below +0
        case BK::Maximum:
          r = va == vb ? (std::signbit(va) ? vb : va) : std::max(va, vb);
          prop = ea + eb;
          break;
        case BK::Minimum:
          r = va == vb ? (std::signbit(va) ? va : vb) : std::min(va, vb);
          prop = ea + eb;
          break;
        case BK::Atan2: {
          r = std::atan2(va, vb);
          // the cut along b <= 0 (a = 0): undecidable where a's error reaches 0 there
          if (ea + eb > 0 && std::abs(va) <= kDecide * ea && vb <= kDecide * eb) t.u[i] = 1;
          const double q = va * va + vb * vb;
          prop = q > 0 ? (std::abs(vb) * ea + std::abs(va) * eb) / q : (ea + eb > 0 ? 10 : 0);
          imp = 2;
          break;
        }
        case BK::Eq:
        case BK::Ne:
        case BK::Lt:
        case BK::Le:
        case BK::Gt:
        case BK::Ge:
        case BK::kCount:
          break;
      }
      if (ints) {
        check_int(t, r, i);
        t.v[i] = R(out, r);
        return;
      }
      fin(t, i, r, (ea + eb > 0) ? prop : 0, imp);
    });
  }

  RTensor scalar_tensor(double s, DType kind, DType common) {
    RTensor t = make(common, {});
    // the number as lt::Scalar holds it
    if (kind == DType::bool_) s = s != 0;
    if (kind == DType::int64) s = std::trunc(s);
    double v;
    if (common == DType::bool_)
      v = s != 0;
    else if (floating(common))
      v = s;
    else
      v = kind == DType::float32 ? std::trunc(s) : s;
    t.v[0] = R(common, v);
    return t;
  }

  RTensor where(const RTensor& c, const RTensor& a0, const RTensor& b0, DType common) {
    RTensor a = cast(a0, common), b = cast(b0, common);
    return elementwise(common, {&c, &a, &b},
                       [&](RTensor& t, size_t i, const std::vector<size_t>& at) {
                         const bool pick_a = c.v[at[0]] != 0;
                         t.v[i] = pick_a ? a.v[at[1]] : b.v[at[2]];
                         t.e[i] = pick_a ? a.e[at[1]] : b.e[at[2]];
                       });
  }

  // out[flat] = in[map(out index)] for layout ops
  RTensor gather(const RTensor& x, const Dims& out_shape,
                 const std::function<int64_t(const std::vector<int64_t>&)>& src) {
    RTensor t = make(x.dtype, out_shape);
    std::vector<int64_t> idx;
    for (int64_t o = 0; o < numel(out_shape); ++o) {
      unravel(o, out_shape, idx);
      const int64_t s = src(idx);
      if (s < 0 || s >= x.size()) {
        c_.fail("layout index out of range");
        return t;
      }
      const auto oi = static_cast<size_t>(o), si = static_cast<size_t>(s);
      t.v[oi] = x.v[si];
      t.e[oi] = x.e[si];
      t.u[oi] = x.u[si];
    }
    return t;
  }

  static int norm(int64_t d, size_t nd) {
    if (nd == 0) return 0;
    return static_cast<int>(d < 0 ? d + static_cast<int64_t>(nd) : d);
  }

  // Whether sum_i x_i is exact, in any order, in a float type of `acc_bits` mantissa bits:
  // every value and every partial sum a multiple of the smallest value's lowest bit that
  // the type holds.
  static bool exact_sum(const std::vector<double>& xs, int acc_bits) {
    int emin = std::numeric_limits<int>::max();
    double total = 0;
    for (double x : xs) {
      if (x == 0) continue;
      int e;
      const double m = std::frexp(std::abs(x), &e);  // x = m * 2^e, m in [0.5, 1)
      auto bits = static_cast<uint64_t>(std::ldexp(m, 53));
      const int low = e - 53 + std::countr_zero(bits);
      if (e - low > acc_bits) return false;  // x itself needs more bits
      emin = std::min(emin, low);
      total += std::abs(x);
    }
    if (total == 0) return true;
    return total < std::ldexp(1.0, emin + acc_bits);
  }

  RTensor reduce(Op op, const RTensor& x, const Node& n, DType out_dtype) {
    const size_t nd = x.shape.size();
    std::vector<char> red(nd, 0);
    if (n.ints[0]) {
      std::fill(red.begin(), red.end(), 1);
    } else if (nd > 0) {
      for (size_t j = 2; j < n.ints.size(); ++j) red[static_cast<size_t>(norm(n.ints[j], nd))] = 1;
    }
    Dims kept;
    for (size_t j = 0; j < nd; ++j)
      if (!red[j]) kept.push_back(x.shape[j]);
    RTensor t = make(out_dtype, n.shape);
    const int64_t nout = numel(kept);
    std::vector<std::vector<size_t>> members(static_cast<size_t>(nout));
    std::vector<int64_t> idx;
    const std::vector<int64_t> kst = strides_of(kept);
    for (int64_t f = 0; f < x.size(); ++f) {
      unravel(f, x.shape, idx);
      int64_t o = 0;
      size_t q = 0;
      for (size_t j = 0; j < nd; ++j)
        if (!red[j]) o += idx[j] * kst[q++];
      members[static_cast<size_t>(o)].push_back(static_cast<size_t>(f));
    }
    for (int64_t o = 0; o < nout; ++o) {
      const auto oi = static_cast<size_t>(o);
      const auto& m = members[oi];
      uint8_t u = 0;
      double es = 0, emax = 0, abs_sum = 0;
      std::vector<double> vals;
      for (size_t f : m) {
        u |= x.u[f];
        es += x.e[f];
        emax = std::max(emax, x.e[f]);
        vals.push_back(x.v[f]);
        abs_sum += std::abs(x.v[f]);
      }
      t.u[oi] = u;
      if (op == Op::Amax) {
        double r = -std::numeric_limits<double>::infinity();
        for (double v : vals) r = std::max(r, v);
        if (x.dtype == DType::bool_ || integral(x.dtype)) {
          t.v[oi] = r;
          continue;
        }
        t.v[oi] = R(out_dtype, r);
        t.e[oi] = emax;
        continue;
      }
      double r = 0;
      for (double v : vals) r += v;
      if (!floating(x.dtype)) {
        if (std::abs(r) > 9e15) c_.fail("int64 sum too large");
        t.v[oi] = r;
        continue;
      }
      const double nred = static_cast<double>(std::max<size_t>(m.size(), 1));
      if (op == Op::Mean) r /= static_cast<double>(m.size());
      const bool exact = es == 0 && exact_sum(vals, 53);
      if (exact) {
        t.v[oi] = R(out_dtype, r);
        continue;
      }
      const double scale = op == Op::Mean ? 1 / nred : 1;
      fin(t, oi, r, scale * (es + nred * std::ldexp(1.0, -52) * abs_sum) + 1e-300, 0);
    }
    return t;
  }

  RTensor matmul(const RTensor& a0, const RTensor& b0, DType d, const Dims& out_shape) {
    RTensor a = cast(a0, d), b = cast(b0, d);
    // as matrices: a 1-d a is [1, k], a 1-d b is [k, 1]
    Dims as = a.shape, bs = b.shape;
    const bool av = as.size() == 1, bv = bs.size() == 1;
    if (av) as.insert(as.begin(), 1);
    if (bv) bs.push_back(1);
    const int64_t m = as[as.size() - 2], k = as.back(), nn = bs.back();
    Dims ba(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
    const Dims batch = bshape(ba, bb);
    const std::vector<int64_t> sa = bstrides(ba, batch), sb = bstrides(bb, batch);
    RTensor t = make(d, out_shape);
    std::vector<int64_t> idx;
    const int64_t nb = numel(batch);
    std::vector<double> prods;
    for (int64_t bi = 0; bi < nb; ++bi) {
      unravel(bi, batch, idx);
      int64_t oa = 0, ob = 0;
      for (size_t j = 0; j < idx.size(); ++j) {
        oa += idx[j] * sa[j];
        ob += idx[j] * sb[j];
      }
      oa *= m * k;
      ob *= k * nn;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < nn; ++j) {
          double r = 0, prop = 0, mag = 0;
          uint8_t u = 0;
          bool rounded = false;  // a product that double rounds (BLAS may fuse it, unrounded)
          prods.clear();
          for (int64_t q = 0; q < k; ++q) {
            const auto ia = static_cast<size_t>(oa + i * k + q),
                       ib = static_cast<size_t>(ob + q * nn + j);
            const double p = a.v[ia] * b.v[ib];
            rounded |= std::fma(a.v[ia], b.v[ib], -p) != 0;
            r += p;
            prods.push_back(p);
            mag += std::abs(p);
            prop += std::abs(b.v[ib]) * a.e[ia] + std::abs(a.v[ia]) * b.e[ib];
            u |= a.u[ia] | b.u[ib];
          }
          const auto oi = static_cast<size_t>((bi * m + i) * nn + j);
          t.u[oi] = u;
          if (!floating(d)) {
            if (std::abs(r) > 9e15) c_.fail("integer product too large");
            check_int(t, r, oi);
            t.v[oi] = R(d, r);
            continue;
          }
          const int bits = mantissa_of(compute_of(d));
          if (prop == 0 && !rounded && exact_sum(prods, bits)) {
            t.v[oi] = R(d, r);
            continue;
          }
          fin(t, oi, r,
              prop + 2 * static_cast<double>(k + 1) * ulp_of(compute_of(d)) * mag + 1e-300, 0);
        }
    }
    return t;
  }

  RTensor index_add(const RTensor& x, const RTensor& index, const RTensor& src0, int dim) {
    RTensor src = cast(src0, x.dtype);
    RTensor t = x;
    const DType acc = compute_of(x.dtype);
    const Dims& s = x.shape;
    const auto d = static_cast<size_t>(dim);
    int64_t outer = 1, inner = 1;
    for (size_t j = 0; j < d; ++j) outer *= s[j];
    for (size_t j = d + 1; j < s.size(); ++j) inner *= s[j];
    const int64_t rows = s[d], len = index.size();
    // accumulate in the computing type, element by element in index order
    std::vector<double> accv(t.v), err(t.e);
    std::vector<uint8_t> inexact(t.v.size(), 0);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < len; ++j) {
        const auto row = static_cast<int64_t>(index.v[static_cast<size_t>(j)]);
        if (row < 0 || row >= rows) {
          c_.fail("index_add index out of range");
          return t;
        }
        for (int64_t q = 0; q < inner; ++q) {
          const auto to = static_cast<size_t>((o * rows + row) * inner + q);
          const auto from = static_cast<size_t>((o * len + j) * inner + q);
          const double sum = accv[to] + src.v[from];
          accv[to] = floating(x.dtype) ? R(acc, sum) : sum;
          err[to] += src.e[from];
          t.u[to] |= src.u[from] | index.u[static_cast<size_t>(j)];
          if (err[to] > 0) inexact[to] = 1;
        }
      }
    for (size_t i = 0; i < t.v.size(); ++i) {
      if (!floating(x.dtype)) {
        check_int(t, accv[i], i);
        t.v[i] = R(x.dtype, accv[i]);
        continue;
      }
      if (inexact[i] || err[i] > 0) {
        fin(t, i, accv[i], err[i] + 4 * ulp_of(acc) * std::abs(accv[i]), 0);
      } else {
        t.v[i] = R(x.dtype, accv[i]);
        t.e[i] = 0;
      }
    }
    return t;
  }

  RTensor softmax(const RTensor& x, int dim, bool log) {
    // as lazytrace composes it: e = exp(x - amax(x, dim, keep)), y = e / sum(e, dim, keep)
    // (log: shifted - log(sum(exp(shifted)))), each step rounded to the dtype; 16-bit inputs
    // are computed in float32 and rounded once at the end (ops/reduce.cpp, as PyTorch)
    if (x.dtype == DType::float16 || x.dtype == DType::bfloat16)
      return cast(softmax(cast(x, DType::float32), dim, log), x.dtype);
    Node red;
    red.op = Op::Amax;
    red.ints = {0, 1, dim};
    red.shape = x.shape;
    if (!red.shape.empty()) red.shape[static_cast<size_t>(norm(dim, x.shape.size()))] = 1;
    RTensor m = reduce(Op::Amax, x, red, x.dtype);
    RTensor shifted = binary(BK::Sub, x, m, x.dtype, x.dtype);
    RTensor e = unary(UK::Exp, shifted, x.dtype);
    red.op = Op::Sum;
    RTensor s = reduce(Op::Sum, e, red, x.dtype);
    if (!log) return binary(BK::Div, e, s, x.dtype, x.dtype);
    RTensor ls = unary(UK::Log, s, x.dtype);
    return binary(BK::Sub, shifted, ls, x.dtype, x.dtype);
  }

  RTensor slice_of(const RTensor& x, int64_t i) {  // x[i] along dim 0
    Dims s(x.shape.begin() + 1, x.shape.end());
    const int64_t n = numel(s);
    const std::vector<int64_t> st = strides_of(s);
    return gather(x, s, [&](const std::vector<int64_t>& idx) {
      int64_t f = 0;
      for (size_t j = 0; j < idx.size(); ++j) f += idx[j] * st[j];
      return i * n + f;
    });
  }

  static RTensor stack0(const std::vector<RTensor>& parts, DType d, const Dims& shape) {
    RTensor t = make(d, shape);
    size_t w = 0;
    for (const RTensor& p : parts)
      for (size_t i = 0; i < p.v.size(); ++i, ++w) {
        t.v[w] = p.v[i];
        t.e[w] = p.e[i];
        t.u[w] = p.u[i];
      }
    return t;
  }

  // Runs a program; `vals` gets every node's value, `multi` the results of multi nodes.
  void run(const Program& p, std::vector<RTensor>& vals, std::vector<std::vector<RTensor>>& multi);

  Ctx& c_;
};

void Eval::run(const Program& p, std::vector<RTensor>& vals,
               std::vector<std::vector<RTensor>>& multi) {
  vals.assign(p.nodes.size(), RTensor());
  multi.assign(p.nodes.size(), {});
  for (size_t i = 0; i < p.nodes.size() && *c_.ok; ++i) {
    const Node& n = p.nodes[i];
    auto A = [&](size_t k) -> const RTensor& { return vals[static_cast<size_t>(n.in[k])]; };
    RTensor& out = vals[i];
    switch (n.op) {
      case Op::Input: {
        out = make(n.dtype, n.shape);
        const std::vector<double>* src = &n.data;
        auto it = c_.data.inputs.find(&n);
        if (it != c_.data.inputs.end()) {
          src = &it->second;
        } else if (n.data.empty()) {
          c_.fail("no data for an input");
          return;
        }
        out.v = *src;
        break;
      }
      case Op::Param:
        out = (*c_.params)[static_cast<size_t>(n.ints[0])];
        break;
      case Op::Outer:
        out = (*c_.outer)[static_cast<size_t>(n.ints[0])];
        break;
      case Op::Full: {
        out = make(n.dtype, n.shape);
        const double v = R(n.dtype, n.f);
        std::fill(out.v.begin(), out.v.end(), v);
        break;
      }
      case Op::Arange: {
        out = make(n.dtype, n.shape);
        for (int64_t j = 0; j < n.ints[0]; ++j)
          out.v[static_cast<size_t>(j)] =
              R(n.dtype, static_cast<double>(n.ints[1]) +
                             static_cast<double>(j) * static_cast<double>(n.ints[2]));
        break;
      }
      case Op::Rand:
      case Op::Randn: {
        auto it = c_.data.random.find(&n);
        if (it == c_.data.random.end()) {
          c_.fail("no values for a random op");
          return;
        }
        out = make(n.dtype, n.shape);
        out.v = it->second;
        break;
      }
      case Op::Unary:
        out = unary(static_cast<UK>(n.kind), A(0), n.dtype);
        break;
      case Op::Binary: {
        const BK k = static_cast<BK>(n.kind);
        DType common = result_type(
            {{A(0).dtype, A(0).shape.empty() ? 1 : 0}, {A(1).dtype, A(1).shape.empty() ? 1 : 0}});
        if ((k == BK::Div || k == BK::Atan2) && !floating(common)) common = DType::float32;
        out = binary(k, A(0), A(1), common, n.dtype);
        break;
      }
      case Op::BinaryScalar: {
        const BK k = static_cast<BK>(n.kind);
        DType common = result_type({{A(0).dtype, A(0).shape.empty() ? 1 : 0}, {n.sdtype, 2}});
        if ((k == BK::Div || k == BK::Atan2) && !floating(common)) common = DType::float32;
        const double sv = n.ints.size() > 1 && n.ints[1] ? c_.static_value : n.f;
        RTensor s = scalar_tensor(sv, n.sdtype, common);
        out = n.ints[0] ? binary(k, s, A(0), common, n.dtype) : binary(k, A(0), s, common, n.dtype);
        break;
      }
      case Op::Where:
        out = where(A(0), A(1), A(2), n.dtype);
        break;
      case Op::WhereScalar: {
        RTensor s = scalar_tensor(n.f, n.sdtype, n.dtype);
        out = n.ints[0] ? where(A(0), s, A(1), n.dtype) : where(A(0), A(1), s, n.dtype);
        break;
      }
      case Op::Cast:
        out = cast(A(0), n.dtype);
        break;
      case Op::Reshape:
      case Op::Unsqueeze:
      case Op::Squeeze:
        out = A(0);
        out.shape = n.shape;
        break;
      case Op::Transpose:
      case Op::Permute: {
        const RTensor& x = A(0);
        const size_t nd = x.shape.size();
        std::vector<int> perm(nd);
        for (size_t j = 0; j < nd; ++j) perm[j] = static_cast<int>(j);
        if (n.op == Op::Transpose) {
          if (!(nd < 2 && n.ints[0] == -2 && n.ints[1] == -1))
            std::swap(perm[static_cast<size_t>(norm(n.ints[0], nd))],
                      perm[static_cast<size_t>(norm(n.ints[1], nd))]);
        } else {
          for (size_t j = 0; j < nd; ++j) perm[j] = norm(n.ints[j], nd);
        }
        const std::vector<int64_t> st = strides_of(x.shape);
        out = gather(x, n.shape, [&](const std::vector<int64_t>& idx) {
          int64_t f = 0;
          for (size_t j = 0; j < nd; ++j) f += idx[j] * st[static_cast<size_t>(perm[j])];
          return f;
        });
        break;
      }
      case Op::BroadcastTo: {
        const std::vector<int64_t> st = bstrides(A(0).shape, n.shape);
        out = gather(A(0), n.shape, [&](const std::vector<int64_t>& idx) {
          int64_t f = 0;
          for (size_t j = 0; j < idx.size(); ++j) f += idx[j] * st[j];
          return f;
        });
        break;
      }
      case Op::Slice: {
        const RTensor& x = A(0);
        const auto d = static_cast<size_t>(norm(n.ints[0], x.shape.size()));
        const int64_t sz = x.shape[d];
        int64_t start = n.ints[1];
        if (start < 0) start += sz;
        start = std::clamp<int64_t>(start, 0, sz);
        const int64_t step = n.ints[3];
        const std::vector<int64_t> st = strides_of(x.shape);
        out = gather(x, n.shape, [&](const std::vector<int64_t>& idx) {
          int64_t f = 0;
          for (size_t j = 0; j < idx.size(); ++j)
            f += (j == d ? start + idx[j] * step : idx[j]) * st[j];
          return f;
        });
        break;
      }
      case Op::Select: {
        const RTensor& x = A(0);
        const auto d = static_cast<size_t>(norm(n.ints[0], x.shape.size()));
        int64_t at = n.ints[1];
        if (at < 0) at += x.shape[d];
        const std::vector<int64_t> st = strides_of(x.shape);
        out = gather(x, n.shape, [&](const std::vector<int64_t>& idx) {
          int64_t f = at * st[d];
          for (size_t j = 0; j < idx.size(); ++j) f += idx[j] * st[j < d ? j : j + 1];
          return f;
        });
        break;
      }
      case Op::Concat:
      case Op::Stack: {
        std::vector<RTensor> parts;
        for (size_t j = 0; j < n.in.size(); ++j) {
          parts.push_back(cast(A(j), n.dtype));
          if (n.op == Op::Stack) {
            const size_t nd = A(j).shape.size();
            const auto d = static_cast<size_t>(norm(n.ints[0], nd + 1));
            parts.back().shape.insert(parts.back().shape.begin() + static_cast<int64_t>(d), 1);
          }
        }
        const size_t nd = n.shape.size();
        const auto d = static_cast<size_t>(norm(n.ints[0], nd));
        out = make(n.dtype, n.shape);
        std::vector<int64_t> idx;
        for (int64_t o = 0; o < numel(n.shape); ++o) {
          unravel(o, n.shape, idx);
          int64_t at = idx[d];
          size_t part = 0;
          while (at >= parts[part].shape[d]) at -= parts[part++].shape[d];
          const RTensor& src = parts[part];
          const std::vector<int64_t> st = strides_of(src.shape);
          int64_t f = 0;
          for (size_t j = 0; j < nd; ++j) f += (j == d ? at : idx[j]) * st[j];
          const auto oi = static_cast<size_t>(o), si = static_cast<size_t>(f);
          out.v[oi] = src.v[si];
          out.e[oi] = src.e[si];
          out.u[oi] = src.u[si];
        }
        break;
      }
      case Op::IndexSelect: {
        const RTensor& x = A(0);
        const RTensor& index = A(1);
        const auto d = static_cast<size_t>(norm(n.ints[0], x.shape.size()));
        const std::vector<int64_t> st = strides_of(x.shape);
        bool bad = false;
        out = gather(x, n.shape, [&](const std::vector<int64_t>& idx) {
          int64_t f = 0;
          for (size_t j = 0; j < idx.size(); ++j) {
            int64_t v = idx[j];
            if (j == d) {
              v = static_cast<int64_t>(index.v[static_cast<size_t>(idx[j])]);
              if (v < 0 || v >= x.shape[d]) bad = true;
            }
            f += v * st[j];
          }
          return bad ? 0 : f;
        });
        if (bad) c_.fail("index_select index out of range");
        for (int64_t o = 0; o < out.size(); ++o) {
          std::vector<int64_t> idx;
          unravel(o, n.shape, idx);
          out.u[static_cast<size_t>(o)] |= index.u[static_cast<size_t>(idx[d])];
        }
        break;
      }
      case Op::IndexAdd:
        out = index_add(A(0), A(1), A(2), norm(n.ints[0], A(0).shape.size()));
        break;
      case Op::Sum:
      case Op::Mean:
      case Op::Amax:
        out = reduce(n.op, A(0), n, n.dtype);
        break;
      case Op::Softmax:
      case Op::LogSoftmax: {
        if (A(0).shape.empty()) {
          out = make(n.dtype, {});
          out.v[0] = n.op == Op::Softmax ? 1 : 0;
          out.u[0] = A(0).u[0];
          break;
        }
        out = softmax(A(0), norm(n.ints[0], A(0).shape.size()), n.op == Op::LogSoftmax);
        break;
      }
      case Op::Matmul:
        out = matmul(A(0), A(1), n.dtype, n.shape);
        break;
      case Op::Scan:
      case Op::Fori:
      case Op::While:
      case Op::Pure: {
        const Program& body = n.bodies[0];
        Ctx bc = c_;
        bc.outer = &vals;
        std::vector<RTensor> params;
        std::vector<RTensor> bvals;
        std::vector<std::vector<RTensor>> bmulti;
        Eval be(bc);
        auto outs = [&](size_t k) -> const RTensor& {
          return bvals[static_cast<size_t>(body.outputs[k])];
        };
        std::vector<RTensor>& res = multi[i];
        if (n.op == Op::Pure) {
          // every call of a function runs the body of its first call (as lazytrace traces it)
          const Program* fb = &body;
          for (size_t j = 0; j < i; ++j)
            if (p.nodes[j].op == Op::Pure && p.nodes[j].ints[0] == n.ints[0]) {
              fb = &p.nodes[j].bodies[0];
              break;
            }
          auto fouts = [&](size_t k) -> const RTensor& {
            return bvals[static_cast<size_t>(fb->outputs[k])];
          };
          bc.static_value = n.f;
          for (size_t j = 0; j < n.in.size(); ++j) params.push_back(A(j));
          bc.params = &params;
          be.run(*fb, bvals, bmulti);
          for (size_t k = 0; k < fb->outputs.size(); ++k) res.push_back(fouts(k));
          break;
        }
        if (n.op == Op::Scan) {
          const auto nc = static_cast<size_t>(n.ints[0]);
          std::vector<RTensor> carry;
          for (size_t j = 0; j < nc; ++j) carry.push_back(A(j));
          const int64_t len = A(nc).shape[0];
          std::vector<std::vector<RTensor>> ys(static_cast<size_t>(len));
          for (int64_t step = 0; step < len && *c_.ok; ++step) {
            const int64_t at = n.ints[1] ? len - 1 - step : step;
            params = carry;
            for (size_t j = nc; j < n.in.size(); ++j) params.push_back(slice_of(A(j), at));
            bc.params = &params;
            be.run(body, bvals, bmulti);
            if (!*c_.ok) return;
            for (size_t j = 0; j < nc; ++j) carry[j] = outs(j);
            for (size_t k = nc; k < body.outputs.size(); ++k)
              ys[static_cast<size_t>(at)].push_back(outs(k));
          }
          res = carry;
          for (size_t k = nc; k < body.outputs.size(); ++k) {
            std::vector<RTensor> parts;
            for (int64_t s = 0; s < len; ++s) parts.push_back(ys[static_cast<size_t>(s)][k - nc]);
            res.push_back(stack0(parts, n.rdtypes[k], n.rshapes[k]));
          }
          break;
        }
        if (n.op == Op::Fori) {
          const size_t first = n.ints[2] ? 2 : 0;
          std::vector<RTensor> carry;
          for (size_t j = first; j < n.in.size(); ++j) carry.push_back(A(j));
          int64_t lo = n.ints[0], hi = n.ints[1];
          if (n.ints[2]) {
            lo = static_cast<int64_t>(A(0).v[0]);
            hi = static_cast<int64_t>(A(1).v[0]);
            if (A(0).u[0] || A(1).u[0]) {
              for (RTensor& c : carry) std::fill(c.u.begin(), c.u.end(), 1);
              res = carry;
              break;
            }
          }
          for (int64_t it = lo; it < hi && *c_.ok; ++it) {
            RTensor iv = make(DType::int64, {});
            iv.v[0] = static_cast<double>(it);
            params = {iv};
            for (const RTensor& c : carry) params.push_back(c);
            bc.params = &params;
            be.run(body, bvals, bmulti);
            if (!*c_.ok) return;
            for (size_t j = 0; j < carry.size(); ++j) carry[j] = outs(j);
          }
          res = carry;
          break;
        }
        // while: body outputs the next carries and the condition of the current ones
        std::vector<RTensor> carry;
        for (size_t j = 0; j < n.in.size(); ++j) carry.push_back(A(j));
        for (int iter = 0;; ++iter) {
          if (iter > 1000) {
            c_.fail("while_loop does not stop");
            return;
          }
          params = carry;
          bc.params = &params;
          be.run(body, bvals, bmulti);
          if (!*c_.ok) return;
          const RTensor& cond = outs(carry.size());
          if (cond.u[0]) {
            for (RTensor& c : carry) std::fill(c.u.begin(), c.u.end(), 1);
            break;
          }
          if (cond.v[0] == 0) break;
          for (size_t j = 0; j < carry.size(); ++j) carry[j] = outs(j);
        }
        res = carry;
        break;
      }
      case Op::Proj:
        out = multi[static_cast<size_t>(n.in[0])][static_cast<size_t>(n.ints[0])];
        break;
    }
    if (!*c_.ok) return;
    if (!is_multi(n.op)) {
      out.dtype = n.dtype;
      out.shape = n.shape;
      if (static_cast<int64_t>(out.v.size()) != numel(n.shape)) {
        c_.fail(label(i, n.op) + ": reference size mismatch");
        return;
      }
      for (size_t j = 0; j < out.v.size(); ++j)
        if (!std::isfinite(out.v[j])) {
          c_.fail(label(i, n.op) + " is not finite");
          return;
        }
    }
  }
}

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t h = a ^ (b + 0x9E3779B97F4A7C15ULL + (a << 6) + (a >> 2));
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

void inputs_of(const Program& p, uint64_t seed, bool smooth, bool also_fixed, DataSet& out,
               uint64_t& counter) {
  for (const Node& n : p.nodes) {
    const uint64_t id = counter++;
    if (n.op == Op::Input && n.ints[0] != kFixed && (n.data.empty() || also_fixed)) {
      std::mt19937_64 rng(mix(seed, id));
      std::vector<double> v(static_cast<size_t>(numel(n.shape)));
      for (double& x : v) {
        if (n.ints[0] == kBool) {
          x = static_cast<double>(rng() % 2);
        } else if (n.ints[0] == kIntRange) {
          const int64_t lo = n.ints[1], hi = n.ints[2];
          x = static_cast<double>(lo +
                                  static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1)));
        } else {
          const double u = std::uniform_real_distribution<double>(-1, 1)(rng);
          x = u * n.f;
          if (!smooth && rng() % 10 == 0)
            x = static_cast<double>(static_cast<int>(rng() % 5) - 2) * 0.5;
          x = round_to(n.dtype, x);
          if (smooth && std::abs(x) < 1e-3) x = 0.25;
        }
      }
      out.inputs[&n] = std::move(v);
    }
    if (n.op == Op::Pure && !n.bodies.empty()) {
      // the calls of one function hold equal bodies: the same values for their inputs
      uint64_t local = (static_cast<uint64_t>(n.ints[0]) + 1) << 32;
      inputs_of(n.bodies[0], seed, smooth, also_fixed, out, local);
      continue;
    }
    for (const Program& b : n.bodies) inputs_of(b, seed, smooth, also_fixed, out, counter);
  }
}

}  // namespace

void make_inputs(const Program& p, uint64_t data_seed, bool smooth, DataSet& out, bool also_fixed) {
  uint64_t counter = 0;
  inputs_of(p, data_seed, smooth, also_fixed, out, counter);
}

RefResult run_reference(const Program& p, const DataSet& data, bool round) {
  RefResult r;
  Ctx c{data, round, nullptr, nullptr, 0, &r.ok, &r.why};
  Eval e(c);
  e.run(p, r.nodes, r.results);
  return r;
}

}  // namespace fuzz
