// The random program generator. Each node gets a bound on the magnitude of its values; an
// op whose operands could leave its domain (log of a negative, a division by 0, an exp or a
// product that overflows, a cast out of range) gets wrapped operands first: abs(x) + 0.5,
// tanh(x) * c, or a clamp for integers.
#include "generator.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>

namespace fuzz {
namespace {

using Rng = std::mt19937_64;
constexpr int64_t kMaxNumel = 4096;
constexpr double kCarryFloat = 3, kCarryInt = 50;

enum class Palette { F32, F64, Half, Int, Mixed };

double limit_of(DType d) {
  switch (d) {
    case DType::float16:
      return 2e4;
    case DType::bfloat16:
    case DType::float32:
    case DType::float64:
      return 1e5;
    case DType::int32:
    case DType::int64:
      return 1 << 20;
    case DType::bool_:
      return 1;
  }
  return 1;
}

const std::set<std::string> kFamilies = {
    "unary",     "binary",  "compare",      "where",     "cast",        "reshape",
    "transpose", "permute", "broadcast",    "slice",     "select",      "squeeze",
    "concat",    "stack",   "index_select", "index_add", "sum",         "mean",
    "amax",      "softmax", "matmul",       "random",    "arange",      "full",
    "scan",      "fori",    "while",        "pure",      "materialize", "reuse"};

struct Shared {
  int64_t next_group = 0;
};

class Gen {
 public:
  Gen(Rng& rng, const GenOptions& opt, Program& p, Gen* parent, int depth, bool grad, Palette pal,
      Shared& shared)
      : rng_(rng),
        opt_(opt),
        p_(p),
        parent_(parent),
        depth_(depth),
        grad_(grad),
        pal_(pal),
        shared_(shared) {}

  std::vector<double> bound;  // per node: a bound on |value|
  double static_value = 0;    // a Pure body's static argument, if it has one
  bool has_static = false;

  // ---- randomness
  int uni(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double pr) { return std::uniform_real_distribution<double>(0, 1)(rng_) < pr; }
  template <typename T>
  const T& one_of(const std::vector<T>& v) {
    return v[static_cast<size_t>(uni(0, static_cast<int>(v.size()) - 1))];
  }
  bool off(const char* fam) const { return opt_.without.count(fam) > 0; }

  const Node& N(int i) const { return p_.nodes[static_cast<size_t>(i)]; }
  DType dt(int i) const { return N(i).dtype; }
  const Dims& sh(int i) const { return N(i).shape; }
  int size() const { return static_cast<int>(p_.nodes.size()); }

  // ---- adding nodes: inference decides validity; a value past its dtype's limit is refused
  int add(Node n, double b) {
    p_.nodes.push_back(std::move(n));
    std::string why;
    if (!infer_node(p_, p_.nodes.size() - 1, parent_ ? &parent_->p_ : nullptr, &why)) {
      p_.nodes.pop_back();
      return -1;
    }
    const Node& m = p_.nodes.back();
    if (!is_multi(m.op)) {
      if (m.dtype == DType::bool_) b = 1;
      if (integral(m.dtype)) b = std::ceil(b);
      if (numel(m.shape) > kMaxNumel || !(b <= limit_of(m.dtype))) {
        p_.nodes.pop_back();
        return -1;
      }
    }
    bound.push_back(b);
    return size() - 1;
  }

  DType palette_dtype() {
    switch (pal_) {
      case Palette::F32:
        return chance(0.9) ? DType::float32 : DType::float64;
      case Palette::F64:
        return chance(0.85) ? DType::float64 : DType::float32;
      case Palette::Half:
        return one_of(std::vector<DType>{DType::float16, DType::bfloat16, DType::float16,
                                         DType::bfloat16, DType::float32});
      case Palette::Int:
        return one_of(std::vector<DType>{DType::int64, DType::int32, DType::int64, DType::bool_});
      case Palette::Mixed:
        return one_of(std::vector<DType>{DType::float32, DType::float64, DType::float16,
                                         DType::bfloat16, DType::int32, DType::int64,
                                         DType::bool_});
    }
    return DType::float32;
  }
  // a dtype for a tensor combined with x: mostly x's own
  DType partner_dtype(DType x) {
    if (grad_) return chance(0.8) ? x : (chance(0.5) ? DType::float32 : DType::float64);
    return chance(0.75) ? x : palette_dtype();
  }

  Dims random_shape() {
    const int r = uni(0, 99);
    int rank = r < 5 ? 0 : r < 25 ? 1 : r < 60 ? 2 : r < 85 ? 3 : r < 97 ? 4 : uni(5, 7);
    Dims s;
    for (int i = 0; i < rank; ++i) s.push_back(uni(1, rank >= 5 ? 3 : 6));
    return s;
  }

  // ---- leaves
  int input(DType d, const Dims& shape) {
    Node n;
    n.op = Op::Input;
    n.dtype = d;
    n.shape = shape;
    double b;
    if (floating(d)) {
      n.ints = {kFloatRange, 0, 0};
      n.f = one_of(std::vector<double>{1, 2, 2, 3, 0.5});
      b = n.f;
    } else if (d == DType::bool_) {
      n.ints = {kBool, 0, 1};
      b = 1;
    } else {
      const int64_t a = one_of(std::vector<int64_t>{2, 3, 5, 9});
      n.ints = {kIntRange, -a, a};
      b = static_cast<double>(a);
    }
    return add(n, b);
  }
  int int_input(DType d, const Dims& shape, int64_t lo, int64_t hi) {
    Node n;
    n.op = Op::Input;
    n.dtype = d;
    n.shape = shape;
    n.ints = {kIntRange, lo, hi};
    return add(n, static_cast<double>(std::max(std::abs(lo), std::abs(hi))));
  }
  int full(DType d, const Dims& shape, double v) {
    Node n;
    n.op = Op::Full;
    n.dtype = d;
    n.shape = shape;
    n.f = floating(d) ? v : d == DType::bool_ ? (v != 0) : std::trunc(v);
    return add(n, std::abs(n.f));
  }

  // ---- single ops
  int unary(UK k, int x) {
    Node n;
    n.op = Op::Unary;
    n.kind = static_cast<uint8_t>(k);
    n.in = {x};
    const double b = bound[static_cast<size_t>(x)];
    double ob = b;
    switch (k) {
      case UK::Exp:
        ob = std::exp(b);
        break;
      case UK::Log:
        ob = std::max(std::abs(std::log(b + 1e-300)), 0.7) + 1;
        break;
      case UK::Log1p:
        ob = std::log1p(b) + 1;
        break;
      case UK::Sin:
      case UK::Cos:
      case UK::Tanh:
      case UK::Sigmoid:
      case UK::Erf:
        ob = 1;
        break;
      case UK::Sqrt:
        ob = std::sqrt(b) + 1;
        break;
      case UK::Rsqrt:
        ob = 1.5;
        break;
      case UK::Gelu:
      case UK::Silu:
        ob = b + 0.3;
        break;
      case UK::Neg:
      case UK::Relu:
      case UK::Abs:
      case UK::kCount:
        break;
    }
    return add(n, ob);
  }
  int bscalar(BK k, int x, double s, DType kind, bool left, bool use_static = false) {
    Node n;
    n.op = Op::BinaryScalar;
    n.kind = static_cast<uint8_t>(k);
    n.in = {x};
    n.f = s;
    n.sdtype = kind;
    n.ints = {left ? 1 : 0, use_static ? 1 : 0};
    const double b = bound[static_cast<size_t>(x)], a = std::abs(s);
    double ob = b;
    switch (k) {
      case BK::Add:
      case BK::Sub:
        ob = b + a;
        break;
      case BK::Mul:
        ob = b * a;
        break;
      case BK::Div:
        ob = left ? a / 0.5 : b / std::max(a, 1e-9);
        break;
      case BK::Pow:
        ob = left ? std::pow(std::max(a, 1.0), b) + std::pow(std::max(1 / a, 1.0), b)
                  : std::pow(std::max(b, 1.0), a) + std::pow(2.0, std::abs(s));
        break;
      case BK::Maximum:
      case BK::Minimum:
      case BK::Atan2:
      case BK::Eq:
      case BK::Ne:
      case BK::Lt:
      case BK::Le:
      case BK::Gt:
      case BK::Ge:
      case BK::kCount:
        ob = 1;
    }
    return add(n, ob);
  }
  int binary(BK k, int a, int b2) {
    Node n;
    n.op = Op::Binary;
    n.kind = static_cast<uint8_t>(k);
    n.in = {a, b2};
    const double ba = bound[static_cast<size_t>(a)], bb = bound[static_cast<size_t>(b2)];
    double ob = 1;
    switch (k) {
      case BK::Add:
      case BK::Sub:
        ob = ba + bb;
        break;
      case BK::Mul:
        ob = ba * bb;
        break;
      case BK::Div:
        ob = ba / 0.5;
        break;
      case BK::Pow:
        ob = 8;
        break;
      case BK::Maximum:
      case BK::Minimum:
        ob = std::max(ba, bb);
        break;
      case BK::Atan2:
        ob = 3.2;
        break;
      case BK::Eq:
      case BK::Ne:
      case BK::Lt:
      case BK::Le:
      case BK::Gt:
      case BK::Ge:
      case BK::kCount:
        ob = 1;
    }
    return add(n, ob);
  }
  int cast(int x, DType d) {
    if (dt(x) == d) return x;
    Node n;
    n.op = Op::Cast;
    n.dtype = d;
    n.in = {x};
    return add(n, bound[static_cast<size_t>(x)] + 1);
  }
  int layout(Op op, int x, std::vector<int64_t> ints, Dims shape = {}) {
    Node n;
    n.op = op;
    n.in = {x};
    n.ints = std::move(ints);
    n.shape = std::move(shape);
    return add(n, bound[static_cast<size_t>(x)]);
  }
  int reduce(Op op, int x, bool all, bool keepdim, const std::vector<int64_t>& dims) {
    Node n;
    n.op = op;
    n.in = {x};
    n.ints = {all ? 1 : 0, keepdim ? 1 : 0};
    for (int64_t d : dims) n.ints.push_back(d);
    double k = 1;
    const Dims& s = sh(x);
    if (all) {
      k = static_cast<double>(numel(s));
    } else if (!s.empty()) {
      for (int64_t d : dims)
        k *= static_cast<double>(
            s[static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(s.size()) : d)]);
    }
    const double b = bound[static_cast<size_t>(x)];
    return add(n, op == Op::Sum ? b * k : b);
  }

  // ---- wrappers that keep values in range
  // |values| <= target afterwards (tanh * c for floats, a clamp for integers)
  int fit(int x, double target) {
    if (x < 0 || bound[static_cast<size_t>(x)] <= target) return x;
    const DType d = dt(x);
    if (d == DType::bool_) return x;
    if (floating(d)) {
      int t = unary(UK::Tanh, x);
      const double c = std::min(target, one_of(std::vector<double>{1, 2, 3}));
      if (t >= 0 && c != 1) t = bscalar(BK::Mul, t, c, DType::float32, false);
      return t;
    }
    const double c = std::max(1.0, std::floor(std::min(target, 50.0)));
    int hi = full(d, {}, c), lo = full(d, {}, -c);
    if (hi < 0 || lo < 0) return -1;
    bound[static_cast<size_t>(x)] = std::max(bound[static_cast<size_t>(x)], 0.0);
    // the clamp's own bound is c, whatever x's
    Node mn;
    mn.op = Op::Binary;
    mn.kind = static_cast<uint8_t>(BK::Minimum);
    mn.in = {x, hi};
    int m = add(mn, c);
    if (m < 0) return -1;
    Node mx;
    mx.op = Op::Binary;
    mx.kind = static_cast<uint8_t>(BK::Maximum);
    mx.in = {m, lo};
    return add(mx, c);
  }
  // values >= margin (>= 1 for integers)
  int positive(int x, double margin) {
    if (x < 0) return -1;
    if (dt(x) == DType::bool_) x = cast(x, DType::int64);
    if (x < 0) return -1;
    int a = unary(UK::Abs, x);
    if (a < 0) return -1;
    if (integral(dt(a))) return bscalar(BK::Add, a, 1, DType::int64, false);
    return bscalar(BK::Add, a, margin, DType::float32, false);
  }

  // ---- choosing operands
  int pick(const std::function<bool(int)>& ok) {
    std::vector<int> c;
    for (int i = 0; i < size(); ++i)
      if (!is_multi(N(i).op) && ok(i)) c.push_back(i);
    if (c.empty()) return -1;
    if (chance(0.6)) {
      const int from = std::max(0, static_cast<int>(c.size()) - 6);
      return c[static_cast<size_t>(uni(from, static_cast<int>(c.size()) - 1))];
    }
    return one_of(c);
  }
  int pick_any() {
    return pick([](int) { return true; });
  }

  static bool broadcasts(const Dims& a, const Dims& b) {
    const size_t n = std::max(a.size(), b.size());
    int64_t total = 1;
    for (size_t i = 0; i < n; ++i) {
      const int64_t ia = static_cast<int64_t>(a.size() + i) - static_cast<int64_t>(n);
      const int64_t ib = static_cast<int64_t>(b.size() + i) - static_cast<int64_t>(n);
      const int64_t da = ia >= 0 ? a[static_cast<size_t>(ia)] : 1;
      const int64_t db = ib >= 0 ? b[static_cast<size_t>(ib)] : 1;
      if (da != db && da != 1 && db != 1) return false;
      total *= std::max(da, db);
    }
    return total <= kMaxNumel;
  }

  // A shape that broadcasts with s: s itself, a suffix, some dims made 1, a leading dim more.
  Dims variant(const Dims& s) {
    Dims v = s;
    const int r = uni(0, 9);
    if (r < 4) return v;
    if (r < 6 && !v.empty()) {
      v.erase(v.begin(), v.begin() + uni(1, static_cast<int>(v.size())));
      return v;
    }
    if (r < 9) {
      for (int64_t& d : v)
        if (chance(0.4)) d = 1;
      return v;
    }
    if (v.size() < 5 && numel(v) * 3 <= kMaxNumel) v.insert(v.begin(), uni(1, 3));
    return v;
  }

  // A tensor to combine elementwise with x.
  int partner(int x, bool allow_self = true) {
    if (allow_self && chance(0.08)) return x;
    if (chance(0.5)) {
      int c = pick([&](int i) { return i != x && broadcasts(sh(i), sh(x)) && bool_ok(i); });
      if (c >= 0) return c;
    }
    if (!grad_ && !off("full") && chance(0.12))
      return full(partner_dtype(dt(x)), variant(sh(x)),
                  one_of(std::vector<double>{0, 1, 2.5, -1.5, 0.5}));
    return input(partner_dtype(dt(x)), variant(sh(x)));
  }
  bool bool_ok(int i) const { return !grad_ || floating(dt(i)); }

  // ---- the op families
  int gen_unary() {
    int x = pick_any();
    if (x < 0) return -1;
    UK k = static_cast<UK>(uni(0, static_cast<int>(UK::kCount) - 1));
    const bool int_only = pal_ == Palette::Int;
    if (int_only && !(k == UK::Neg || k == UK::Abs || k == UK::Relu))
      k = one_of(std::vector<UK>{UK::Neg, UK::Abs, UK::Relu});
    const bool signed_op = k == UK::Neg || k == UK::Abs || k == UK::Relu;
    if (signed_op && dt(x) == DType::bool_) x = cast(x, int_only ? DType::int64 : palette_num());
    if (x < 0) return -1;
    switch (k) {
      case UK::Exp:
        x = fit(x, 4);
        break;
      case UK::Log:
      case UK::Sqrt:
      case UK::Rsqrt:
        x = positive(fit(x, 1e3), one_of(std::vector<double>{0.5, 0.25, 1}));
        break;
      case UK::Log1p:
        x = dt(x) == DType::bool_ ? x : unary(UK::Abs, x);
        break;
      case UK::Sin:
      case UK::Cos:
        x = fit(x, 20);
        break;
      case UK::Neg:
      case UK::Tanh:
      case UK::Sigmoid:
      case UK::Relu:
      case UK::Gelu:
      case UK::Silu:
      case UK::Abs:
      case UK::Erf:
      case UK::kCount:
        break;
    }
    if (x < 0) return -1;
    return unary(k, x);
  }
  DType palette_num() {
    for (int i = 0; i < 8; ++i) {
      DType d = palette_dtype();
      if (d != DType::bool_) return d;
    }
    return DType::int64;
  }

  int gen_binary() {
    int a = pick_any();
    if (a < 0) return -1;
    std::vector<BK> kinds = {BK::Add,     BK::Sub,   BK::Mul, BK::Div, BK::Pow, BK::Maximum,
                             BK::Minimum, BK::Atan2, BK::Add, BK::Mul, BK::Sub};
    if (pal_ == Palette::Int) kinds = {BK::Add, BK::Sub, BK::Mul, BK::Maximum, BK::Minimum};
    BK k = one_of(kinds);
    int b = partner(a);
    if (b < 0) return -1;
    const DType common =
        result_type({{dt(a), sh(a).empty() ? 1 : 0}, {dt(b), sh(b).empty() ? 1 : 0}});
    if (common == DType::bool_ && (k == BK::Sub || k == BK::Pow)) k = BK::Add;
    const double lim = limit_of(common == DType::bool_ ? DType::int64 : common);
    switch (k) {
      case BK::Add:
      case BK::Sub:
        if (bound[static_cast<size_t>(a)] + bound[static_cast<size_t>(b)] > lim) {
          a = fit(a, lim / 4);
          b = a == b ? a : fit(b, lim / 4);
        }
        break;
      case BK::Mul:
        if (bound[static_cast<size_t>(a)] * bound[static_cast<size_t>(b)] > lim) {
          a = fit(a, 30);
          b = fit(b, 30);
        }
        break;
      case BK::Div:
        b = positive(fit(b, 1e3), 0.5);
        if (b >= 0 && chance(0.3)) b = unary(UK::Neg, b);
        if (bound[static_cast<size_t>(a)] * 2 > lim) a = fit(a, lim / 4);
        break;
      case BK::Pow:
        a = positive(fit(a, 2), 0.5);
        if (b >= 0 && !floating(dt(b))) b = cast(b, DType::float32);
        b = fit(b, 2);
        break;
      case BK::Atan2:
        if (grad_) b = positive(b, 0.5);
        break;
      case BK::Maximum:
      case BK::Minimum:
      case BK::Eq:
      case BK::Ne:
      case BK::Lt:
      case BK::Le:
      case BK::Gt:
      case BK::Ge:
      case BK::kCount:
        break;
    }
    if (a < 0 || b < 0) return -1;
    return binary(k, a, b);
  }

  double float_scalar() {
    return one_of(std::vector<double>{0, 1, -1, 0.5, 2, -2.5, 3, 0.25, 1.5, -0.75});
  }

  int gen_scalar_binary() {
    int x = pick_any();
    if (x < 0) return -1;
    std::vector<BK> kinds = {BK::Add, BK::Sub, BK::Mul, BK::Div, BK::Pow, BK::Mul, BK::Add};
    if (!grad_ && !off("compare"))
      for (BK c : {BK::Eq, BK::Ne, BK::Lt, BK::Le, BK::Gt, BK::Ge}) kinds.push_back(c);
    if (pal_ == Palette::Int) kinds = {BK::Add, BK::Sub, BK::Mul, BK::Pow, BK::Lt, BK::Ge, BK::Eq};
    const BK k = one_of(kinds);
    // the number's kind: a float literal, an integer or a bool
    DType kind = DType::float32;
    const int r = uni(0, 9);
    if (pal_ == Palette::Int || r < 3) kind = DType::int64;
    if (!grad_ && r == 9) kind = DType::bool_;
    double s = kind == DType::float32 ? float_scalar()
               : kind == DType::int64
                   ? static_cast<double>(one_of(std::vector<int>{0, 1, -1, 2, 3, -2}))
                   : static_cast<double>(uni(0, 1));
    bool left = (k == BK::Sub || k == BK::Div || k == BK::Pow) && chance(0.3);
    const bool use_static = has_static && (k == BK::Mul || k == BK::Add) && chance(0.5);
    if (use_static) {
      s = static_value;
      kind = DType::float32;
      left = false;
    }
    const DType common = result_type({{dt(x), sh(x).empty() ? 1 : 0}, {kind, 2}});
    if (common == DType::bool_ && (k == BK::Sub || k == BK::Pow)) return -1;
    const double lim = limit_of(common == DType::bool_ ? DType::int64 : common);
    switch (k) {
      case BK::Add:
      case BK::Sub:
        if (bound[static_cast<size_t>(x)] + std::abs(s) > lim) x = fit(x, lim / 4);
        break;
      case BK::Mul:
        if (bound[static_cast<size_t>(x)] * std::abs(s) > lim) x = fit(x, lim / 8);
        break;
      case BK::Div:
        if (left) {
          x = positive(fit(x, 1e3), 0.5);
        } else {
          if (s == 0) s = kind == DType::bool_ ? 1 : 2;
          if (bound[static_cast<size_t>(x)] / std::abs(s) > lim) x = fit(x, lim / 8);
        }
        break;
      case BK::Pow:
        if (left) {
          // s ** x: a positive base, a bounded exponent
          kind = DType::float32;
          s = one_of(std::vector<double>{0.5, 2, 3, 1.5});
          x = fit(x, 4);
        } else if (kind == DType::float32 && s != std::floor(s)) {
          x = positive(fit(x, 3), 0.5);
        } else {
          // integer exponents 0..3 (negative ones are 0 for integers in lazytrace, an error
          // in PyTorch: not generated)
          s = uni(0, 3);
          if (kind == DType::bool_) kind = DType::int64;
          x = fit(x, 20);
        }
        break;
      case BK::Maximum:
      case BK::Minimum:
      case BK::Atan2:
      case BK::Eq:
      case BK::Ne:
      case BK::Lt:
      case BK::Le:
      case BK::Gt:
      case BK::Ge:
      case BK::kCount:
        break;
    }
    if (x < 0) return -1;
    return bscalar(k, x, s, kind, left, use_static);
  }

  int gen_compare() {
    int a = pick_any();
    if (a < 0) return -1;
    int b = partner(a);
    if (b < 0) return -1;
    const BK k = one_of(std::vector<BK>{BK::Eq, BK::Ne, BK::Lt, BK::Le, BK::Gt, BK::Ge});
    return binary(k, a, b);
  }

  int condition_for(int x) {
    if (grad_) {
      int c = pick([&](int i) {
        return dt(i) == DType::bool_ && N(i).op == Op::Input && broadcasts(sh(i), sh(x));
      });
      if (c >= 0 && chance(0.5)) return c;
      return input(DType::bool_, variant(sh(x)));
    }
    int c = pick([&](int i) { return dt(i) == DType::bool_ && broadcasts(sh(i), sh(x)); });
    if (c >= 0 && chance(0.6)) return c;
    if (chance(0.3)) return input(DType::bool_, variant(sh(x)));
    int b = partner(x);
    if (b < 0) return -1;
    return binary(one_of(std::vector<BK>{BK::Lt, BK::Gt, BK::Ne, BK::Le}), x, b);
  }

  int gen_where() {
    int a = pick_any();
    if (a < 0) return -1;
    int c = condition_for(a);
    if (c < 0) return -1;
    if (chance(0.25)) {
      Node n;
      n.op = Op::WhereScalar;
      n.in = {c, a};
      n.sdtype = pal_ == Palette::Int ? DType::int64 : chance(0.7) ? DType::float32 : DType::int64;
      n.f = n.sdtype == DType::int64 ? static_cast<double>(uni(-2, 3)) : float_scalar();
      n.ints = {chance(0.5) ? 1 : 0};
      return add(n, std::max(bound[static_cast<size_t>(a)], std::abs(n.f)));
    }
    int b = partner(a);
    if (b < 0) return -1;
    if (!broadcasts(sh(c), sh(b))) return -1;
    Node n;
    n.op = Op::Where;
    n.in = {c, a, b};
    return add(n, std::max(bound[static_cast<size_t>(a)], bound[static_cast<size_t>(b)]));
  }

  int gen_cast() {
    int x = pick_any();
    if (x < 0) return -1;
    DType d;
    if (grad_)
      d = dt(x) == DType::float32 ? DType::float64 : DType::float32;
    else if (pal_ == Palette::Int)
      d = one_of(std::vector<DType>{DType::int32, DType::int64, DType::bool_});
    else
      d = one_of(std::vector<DType>{DType::float32, DType::float64, DType::float16, DType::bfloat16,
                                    DType::int32, DType::int64, DType::bool_});
    if (d == dt(x)) return -1;
    if (integral(d) && floating(dt(x))) x = fit(x, one_of(std::vector<double>{3, 50, 1e3}));
    if (d == DType::float16) x = fit(x, limit_of(DType::float16) / 2);
    if (x < 0) return -1;
    return cast(x, d);
  }

  // A random factorization of n into `rank` dims.
  Dims factor(int64_t n, int rank) {
    Dims s(static_cast<size_t>(rank), 1);
    if (rank == 0) return n == 1 ? s : Dims{n};
    std::vector<int64_t> primes;
    int64_t m = n;
    for (int64_t q = 2; q * q <= m; ++q)
      while (m % q == 0) {
        primes.push_back(q);
        m /= q;
      }
    if (m > 1) primes.push_back(m);
    for (int64_t q : primes) s[static_cast<size_t>(uni(0, rank - 1))] *= q;
    return s;
  }

  int gen_reshape(int x = -1) {
    if (x < 0) x = pick_any();
    if (x < 0) return -1;
    const int64_t n = numel(sh(x));
    int rank = uni(0, 4);
    if (n > 1 && rank == 0) rank = 1;
    Dims s = factor(n, rank);
    const int64_t minus =
        (!s.empty() && chance(0.25)) ? uni(0, static_cast<int>(s.size()) - 1) : -1;
    return layout(Op::Reshape, x, {minus}, s);
  }
  int gen_transpose() {
    int x = pick_any();
    if (x < 0) return -1;
    const int nd = static_cast<int>(sh(x).size());
    if (nd < 2) return layout(Op::Transpose, x, {-2, -1});
    return layout(Op::Transpose, x, {uni(-nd, nd - 1), uni(-nd, nd - 1)});
  }
  int gen_permute() {
    int x = pick_any();
    if (x < 0) return -1;
    const int nd = static_cast<int>(sh(x).size());
    std::vector<int64_t> perm(static_cast<size_t>(nd));
    for (int i = 0; i < nd; ++i) perm[static_cast<size_t>(i)] = i;
    std::shuffle(perm.begin(), perm.end(), rng_);
    for (int64_t& d : perm)
      if (chance(0.2)) d -= nd;
    return layout(Op::Permute, x, perm);
  }
  int gen_broadcast() {
    int x = pick_any();
    if (x < 0) return -1;
    Dims t = sh(x);
    for (int64_t& d : t)
      if (d == 1 && chance(0.6)) d = uni(2, 4);
    const int lead = uni(0, 2);
    for (int i = 0; i < lead; ++i) t.insert(t.begin(), uni(1, 4));
    if (t == sh(x)) t.insert(t.begin(), uni(2, 3));
    if (numel(t) > kMaxNumel || t.size() > 7) return -1;
    return layout(Op::BroadcastTo, x, {}, t);
  }
  int gen_slice(int x = -1) {
    if (x < 0) x = pick([&](int i) { return !sh(i).empty(); });
    if (x < 0) return -1;
    const int nd = static_cast<int>(sh(x).size());
    const int d = uni(0, nd - 1);
    const int64_t n = sh(x)[static_cast<size_t>(d)];
    const int64_t step = chance(0.6) ? 1 : uni(2, 3);
    int64_t start = uni(0, static_cast<int>(n) - 1);
    int64_t stop = uni(static_cast<int>(start) + 1, static_cast<int>(n) + 2);
    if (chance(0.25)) start -= n;
    if (chance(0.2) && stop < n) stop -= n;
    // rarely an empty slice: a size-0 dim downstream
    if (chance(0.02)) stop = start;
    if (chance(0.1)) stop = 1000;
    return layout(Op::Slice, x, {chance(0.2) ? d - nd : d, start, stop, step});
  }
  int gen_select() {
    int x = pick([&](int i) { return !sh(i).empty(); });
    if (x < 0) return -1;
    const int nd = static_cast<int>(sh(x).size());
    const int d = uni(0, nd - 1);
    const int64_t n = sh(x)[static_cast<size_t>(d)];
    return layout(Op::Select, x,
                  {chance(0.2) ? d - nd : d, uni(static_cast<int>(-n), static_cast<int>(n) - 1)});
  }
  int gen_squeeze() {
    int x = pick_any();
    if (x < 0) return -1;
    const int nd = static_cast<int>(sh(x).size());
    std::vector<int> ones;
    for (int d = 0; d < nd; ++d)
      if (sh(x)[static_cast<size_t>(d)] == 1) ones.push_back(d);
    if (!ones.empty() && chance(0.5)) return layout(Op::Squeeze, x, {one_of(ones)});
    if (nd >= 7) return -1;
    return layout(Op::Unsqueeze, x, {uni(-(nd + 1), nd)});
  }
  int gen_concat() {
    int x = pick([&](int i) { return !sh(i).empty(); });
    if (x < 0) return -1;
    const int nd = static_cast<int>(sh(x).size());
    const int d = uni(0, nd - 1);
    std::vector<int> parts = {x};
    const int extra = uni(1, 2);
    for (int j = 0; j < extra; ++j) {
      const int r = uni(0, 9);
      int q = -1;
      if (r < 2) {
        q = x;
      } else if (r < 4) {
        q = gen_slice(x);
        if (q >= 0) {
          // a slice along another dim would not match
          Dims a = sh(q), b = sh(x);
          a[static_cast<size_t>(d)] = b[static_cast<size_t>(d)] = 0;
          if (a != b) q = -1;
        }
      } else if (r < 6) {
        q = pick([&](int i) {
          if (sh(i).size() != sh(x).size() || !bool_ok(i)) return false;
          for (int e = 0; e < nd; ++e)
            if (e != d && sh(i)[static_cast<size_t>(e)] != sh(x)[static_cast<size_t>(e)])
              return false;
          return true;
        });
      }
      if (q < 0) {
        Dims s = sh(x);
        s[static_cast<size_t>(d)] = uni(1, 4);
        q = input(partner_dtype(dt(x)), s);
      }
      if (q < 0) return -1;
      parts.push_back(q);
    }
    std::shuffle(parts.begin(), parts.end(), rng_);
    Node n;
    n.op = Op::Concat;
    n.in = parts;
    n.ints = {chance(0.2) ? d - nd : d};
    double b = 0;
    for (int q : parts) b = std::max(b, bound[static_cast<size_t>(q)]);
    return add(n, b);
  }
  int gen_stack() {
    int x = pick_any();
    if (x < 0) return -1;
    const int nd = static_cast<int>(sh(x).size());
    std::vector<int> parts = {x};
    const int extra = uni(1, 2);
    for (int j = 0; j < extra; ++j) {
      int q = chance(0.3) ? x : pick([&](int i) { return i != x && sh(i) == sh(x) && bool_ok(i); });
      if (q < 0) q = input(partner_dtype(dt(x)), sh(x));
      if (q < 0) return -1;
      parts.push_back(q);
    }
    Node n;
    n.op = Op::Stack;
    n.in = parts;
    n.ints = {uni(-(nd + 1), nd)};
    double b = 0;
    for (int q : parts) b = std::max(b, bound[static_cast<size_t>(q)]);
    return add(n, b);
  }
  int index_for(int64_t n) {
    if (!off("arange") && chance(0.15)) {
      Node a;
      a.op = Op::Arange;
      a.dtype = DType::int64;
      const int64_t len = uni(1, static_cast<int>(n));
      a.ints = {len, uni(0, static_cast<int>(n - len)), 1};
      return add(a, static_cast<double>(n));
    }
    return int_input(chance(0.7) ? DType::int64 : DType::int32, {uni(1, 6)}, 0, n - 1);
  }
  int gen_index_select() {
    int x = pick([&](int i) { return !sh(i).empty(); });
    if (x < 0) return -1;
    const int nd = static_cast<int>(sh(x).size());
    const int d = uni(0, nd - 1);
    int idx = index_for(sh(x)[static_cast<size_t>(d)]);
    if (idx < 0) return -1;
    Node n;
    n.op = Op::IndexSelect;
    n.in = {x, idx};
    n.ints = {chance(0.2) ? d - nd : d};
    return add(n, bound[static_cast<size_t>(x)]);
  }
  int gen_index_add() {
    int x = pick([&](int i) { return !sh(i).empty(); });
    if (x < 0) return -1;
    if (dt(x) == DType::bool_) x = cast(x, DType::int64);
    if (x < 0) return -1;
    const int nd = static_cast<int>(sh(x).size());
    const int d = uni(0, nd - 1);
    int idx = index_for(sh(x)[static_cast<size_t>(d)]);
    if (idx < 0) return -1;
    Dims s = sh(x);
    s[static_cast<size_t>(d)] = sh(idx)[0];
    int src = pick(
        [&](int i) { return sh(i) == s && bool_ok(i) && (floating(dt(i)) == floating(dt(x))); });
    if (src < 0 || chance(0.4)) src = input(dt(x), s);
    if (src < 0) return -1;
    const double lim = limit_of(dt(x));
    const double len = static_cast<double>(s[static_cast<size_t>(d)]);
    if (bound[static_cast<size_t>(x)] + len * bound[static_cast<size_t>(src)] > lim) {
      x = fit(x, lim / 4);
      src = fit(src, lim / 4 / len);
    }
    if (x < 0 || src < 0) return -1;
    Node n;
    n.op = Op::IndexAdd;
    n.in = {x, idx, src};
    n.ints = {chance(0.2) ? d - nd : d};
    return add(n, bound[static_cast<size_t>(x)] + len * bound[static_cast<size_t>(src)]);
  }
  std::vector<int64_t> random_dims(int nd) {
    std::vector<int64_t> dims;
    for (int d = 0; d < nd; ++d)
      if (chance(0.45)) dims.push_back(chance(0.2) ? d - nd : d);
    if (dims.empty()) dims.push_back(nd == 0 ? 0 : uni(0, nd - 1));
    std::shuffle(dims.begin(), dims.end(), rng_);
    return dims;
  }
  int gen_reduce(Op op) {
    int x = pick_any();
    if (x < 0) return -1;
    if (op == Op::Mean && !floating(dt(x))) {
      if (pal_ == Palette::Int)
        op = Op::Sum;
      else
        x = cast(x, chance(0.5) ? DType::float32 : palette_dtype());
    }
    if (x < 0) return -1;
    if (op == Op::Mean && !floating(dt(x))) return -1;
    const int nd = static_cast<int>(sh(x).size());
    const bool all = chance(0.25);
    return reduce(op, x, all, chance(0.4), all ? std::vector<int64_t>{} : random_dims(nd));
  }
  int gen_softmax() {
    int x = pick([&](int i) { return floating(dt(i)) && !sh(i).empty(); });
    if (x < 0) return -1;
    const int nd = static_cast<int>(sh(x).size());
    Node n;
    n.op = chance(0.5) ? Op::Softmax : Op::LogSoftmax;
    n.in = {x};
    n.ints = {uni(-nd, nd - 1)};
    const double b = bound[static_cast<size_t>(x)];
    return add(n, n.op == Op::Softmax ? 1 : 2 * b + 10);
  }
  int gen_matmul() {
    int a = pick([&](int i) { return !sh(i).empty() && dt(i) != DType::bool_; });
    if (a < 0) return -1;
    const Dims& as = sh(a);
    const int64_t k = as.back();
    int b = -1;
    const int r = uni(0, 9);
    if (r < 4) {
      b = pick([&](int i) {
        if (dt(i) == DType::bool_ || !bool_ok(i)) return false;
        const Dims& s = sh(i);
        if (s.empty()) return false;
        const int64_t kb = s.size() == 1 ? s[0] : s[s.size() - 2];
        if (kb != k) return false;
        Dims ba(as.begin(), as.end() - std::min<size_t>(as.size(), 2));
        Dims bb(s.begin(), s.end() - std::min<size_t>(s.size(), 2));
        return broadcasts(ba, bb);
      });
    } else if (r < 6) {
      int t = pick([&](int i) {
        return dt(i) != DType::bool_ && bool_ok(i) && sh(i).size() == 2 && sh(i)[1] == k;
      });
      if (t >= 0) b = layout(Op::Transpose, t, {0, 1});
    }
    if (b < 0) {
      Dims s;
      const int form = uni(0, 9);
      if (form < 2) {
        s = {k};
      } else {
        if (form >= 7 && as.size() >= 3) {
          // batch dims of a, some of them 1
          for (size_t j = 0; j + 2 < as.size(); ++j) s.push_back(chance(0.3) ? 1 : as[j]);
        } else if (form == 6 && as.size() <= 2) {
          s.push_back(uni(1, 3));
        }
        s.push_back(k);
        s.push_back(uni(1, 6));
      }
      DType d = partner_dtype(dt(a));
      if (d == DType::bool_) d = DType::int64;
      b = input(d, s);
    }
    if (b < 0) return -1;
    const DType common = result_type({{dt(a), 0}, {dt(b), 0}});
    const double lim = limit_of(common);
    const double kk = static_cast<double>(k);
    if (kk * bound[static_cast<size_t>(a)] * bound[static_cast<size_t>(b)] > lim / 2) {
      const double each = std::sqrt(lim / 2 / kk);
      a = fit(a, each);
      b = fit(b, each);
    }
    if (a < 0 || b < 0) return -1;
    Node n;
    n.op = Op::Matmul;
    n.in = {a, b};
    return add(n, kk * bound[static_cast<size_t>(a)] * bound[static_cast<size_t>(b)]);
  }
  int gen_random() {
    Node n;
    n.op = chance(0.5) ? Op::Rand : Op::Randn;
    n.dtype = one_of(std::vector<DType>{DType::float32, DType::float32, DType::float64,
                                        DType::float16, DType::bfloat16});
    n.shape = random_shape();
    return add(n, n.op == Op::Rand ? 1 : 7);
  }
  int gen_arange() {
    Node n;
    n.op = Op::Arange;
    n.dtype = pal_ == Palette::Int ? DType::int64
                                   : one_of(std::vector<DType>{DType::int64, DType::float32,
                                                               DType::float64, DType::float16});
    // gradient programs are float32/float64 throughout (the oracle's tolerance)
    if (grad_ && n.dtype != DType::float64) n.dtype = DType::float32;
    n.ints = {uni(1, 6), uni(-2, 2), uni(1, 2)};
    return add(n, static_cast<double>(std::abs(n.ints[1]) + n.ints[0] * n.ints[2]));
  }
  int gen_full() {
    DType d = grad_ ? DType::float32 : palette_dtype();
    return full(d, random_shape(), one_of(std::vector<double>{0, 1, -1, 2.5, 0.5, 3}));
  }
  int gen_reuse() {
    int x = pick([&](int i) {
      const Op op = N(i).op;
      return op != Op::Input && op != Op::Param && op != Op::Outer && op != Op::Proj;
    });
    if (x < 0) return -1;
    Node n = N(x);
    n.materialize = false;
    return add(n, bound[static_cast<size_t>(x)]);
  }

  // ---- bodies
  // A tensor of dtype d and shape s computed from x (cast, reshape, broadcast or a reduction).
  int coerce(int x, DType d, const Dims& s) {
    if (x < 0) return -1;
    if (dt(x) != d) {
      if (d == DType::bool_) {
        x = dt(x) == DType::bool_ ? x : bscalar(BK::Gt, x, 0, DType::int64, false);
      } else {
        if (integral(d) && floating(dt(x))) x = fit(x, kCarryInt);
        if (d == DType::float16) x = fit(x, 100);
        x = cast(x, d);
      }
    }
    if (x < 0) return -1;
    if (sh(x) == s) return x;
    if (numel(sh(x)) == numel(s)) return layout(Op::Reshape, x, {-1}, s);
    if (broadcasts(sh(x), s)) {
      // broadcast_to s, when s is the broadcast shape itself
      Dims out;
      bool ok = sh(x).size() <= s.size();
      const size_t off = s.size() - std::min(s.size(), sh(x).size());
      for (size_t j = 0; ok && j < sh(x).size(); ++j) ok = sh(x)[j] == 1 || sh(x)[j] == s[off + j];
      if (ok) return layout(Op::BroadcastTo, x, {}, s);
    }
    const Op op = floating(d) ? (chance(0.5) ? Op::Mean : Op::Amax) : Op::Amax;
    int r = reduce(op, x, true, false, {});
    if (r < 0 || s.empty()) return r;
    return layout(Op::BroadcastTo, r, {}, s);
  }
  // The new value of a carry (param p, bound cb) from body node x.
  int next_carry(int p, int x) {
    const DType d = dt(p);
    const Dims s = sh(p);
    if (d == DType::bool_) {
      int c = coerce(x, d, s);
      if (c < 0) return -1;
      return binary(chance(0.5) ? BK::Ne : BK::Add, p, c);
    }
    const double cb = floating(d) ? kCarryFloat : kCarryInt;
    int c = coerce(fit(x, cb), d, s);
    if (c < 0) return -1;
    int sum = binary(chance(0.7) ? BK::Add : BK::Sub, p, c);
    if (sum < 0) return -1;
    if (floating(d)) {
      int t = unary(UK::Tanh, sum);
      if (t < 0) return -1;
      return bscalar(BK::Mul, t, one_of(std::vector<double>{0.5, 2, 3}), DType::float32, false);
    }
    bound[static_cast<size_t>(sum)] = 2 * cb;
    return fit(sum, cb);
  }

  // Generates a body of `ops` ops from its params (already added as Param nodes).
  void body_ops(int ops) {
    if (parent_ && chance(0.5)) {
      const int captures = uni(1, 2);
      for (int j = 0; j < captures; ++j) {
        int x = parent_->pick([&](int i) { return parent_->bool_ok(i); });
        if (x < 0) break;
        Node n;
        n.op = Op::Outer;
        n.ints = {x};
        add(n, parent_->bound[static_cast<size_t>(x)]);
      }
    }
    const int target = size() + ops;
    for (int tries = 0; size() < target && tries < ops * 8; ++tries) gen_op();
  }

  int add_param(int k, double b) {
    Node n;
    n.op = Op::Param;
    n.ints = {k};
    return add(n, b);
  }

  // Proj nodes for each result of multi node m; returns them
  std::vector<int> projections(int m, const std::vector<double>& bounds) {
    std::vector<int> out;
    for (size_t k = 0; k < N(m).rdtypes.size(); ++k) {
      Node n;
      n.op = Op::Proj;
      n.in = {m};
      n.ints = {static_cast<int64_t>(k)};
      out.push_back(add(n, bounds[k]));
    }
    return out;
  }

  // A carry's initial value from a node of this program.
  int carry_init() {
    int x = pick([&](int i) { return bool_ok(i) && numel(sh(i)) <= 64; });
    if (x < 0 || chance(0.2)) x = input(palette_dtype(), random_shape());
    if (x < 0) return -1;
    if (numel(sh(x)) > 64) return -1;
    return fit(x, floating(dt(x)) ? kCarryFloat : kCarryInt);
  }
  double carry_bound(DType d) const {
    return d == DType::bool_ ? 1 : floating(d) ? kCarryFloat : kCarryInt;
  }

  std::unique_ptr<Gen> child(Program& body) {
    auto g = std::make_unique<Gen>(rng_, opt_, body, this, depth_ + 1, grad_, pal_, shared_);
    return g;
  }

  int gen_scan() {
    const int nc = uni(1, 2);
    std::vector<int> init;
    for (int j = 0; j < nc; ++j) {
      int c = carry_init();
      if (c < 0) return -1;
      init.push_back(c);
    }
    int x0 = pick([&](int i) { return !sh(i).empty() && sh(i)[0] <= 5 && bool_ok(i); });
    if (x0 < 0 || chance(0.2)) {
      Dims s = random_shape();
      if (s.empty()) s = {3};
      s[0] = std::min<int64_t>(s[0], 5);
      x0 = input(palette_dtype(), s);
    }
    if (x0 < 0) return -1;
    std::vector<int> xs = {x0};
    const int64_t len = sh(x0)[0];
    if (chance(0.4)) {
      int x1 =
          pick([&](int i) { return i != x0 && !sh(i).empty() && sh(i)[0] == len && bool_ok(i); });
      if (x1 < 0) {
        Dims s = random_shape();
        s.insert(s.begin(), len);
        if (numel(s) <= kMaxNumel) x1 = input(palette_dtype(), s);
      }
      if (x1 >= 0) xs.push_back(x1);
    }
    Node n;
    n.op = Op::Scan;
    n.in = init;
    for (int x : xs) n.in.push_back(x);
    n.ints = {nc, chance(0.3) ? 1 : 0, chance(0.3) ? 1 : 0};
    Program body;
    for (int x : init) {
      body.param_dtypes.push_back(dt(x));
      body.param_shapes.push_back(sh(x));
    }
    for (int x : xs) {
      body.param_dtypes.push_back(dt(x));
      body.param_shapes.push_back(Dims(sh(x).begin() + 1, sh(x).end()));
    }
    auto g = child(body);
    std::vector<int> params;
    for (size_t j = 0; j < body.param_dtypes.size(); ++j)
      params.push_back(g->add_param(
          static_cast<int>(j), j < init.size() ? carry_bound(dt(init[j]))
                                               : bound[static_cast<size_t>(xs[j - init.size()])]));
    g->body_ops(uni(2, 10));
    for (int j = 0; j < nc; ++j) {
      int c = g->next_carry(params[static_cast<size_t>(j)], g->pick_any());
      if (c < 0) return -1;
      body.outputs.push_back(c);
    }
    std::vector<double> bounds;
    for (int j = 0; j < nc; ++j) bounds.push_back(carry_bound(dt(init[static_cast<size_t>(j)])));
    const int ny = uni(0, 2);
    for (int j = 0; j < ny; ++j) {
      int y = g->pick_any();
      if (y < 0) break;
      body.outputs.push_back(y);
      bounds.push_back(g->bound[static_cast<size_t>(y)]);
    }
    n.bodies.push_back(std::move(body));
    int m = add(n, 0);
    if (m < 0) return -1;
    std::vector<int> r = projections(m, bounds);
    return r.empty() ? -1 : r.back();
  }

  int gen_fori() {
    const int nc = uni(1, 2);
    Node n;
    n.op = Op::Fori;
    const bool tensor_bounds = !grad_ && chance(0.3);
    int64_t lo = uni(-1, 2), hi = lo + uni(-1, 4);
    if (tensor_bounds) {
      int a = int_input(DType::int64, {}, 0, 1), b = int_input(DType::int64, {}, 0, 4);
      if (a < 0 || b < 0) return -1;
      n.in = {a, b};
      lo = 0;
      hi = 4;
    }
    n.ints = {lo, hi, tensor_bounds ? 1 : 0};
    std::vector<int> init;
    for (int j = 0; j < nc; ++j) {
      int c = carry_init();
      if (c < 0) return -1;
      init.push_back(c);
      n.in.push_back(c);
    }
    Program body;
    body.param_dtypes.push_back(DType::int64);
    body.param_shapes.push_back({});
    for (int x : init) {
      body.param_dtypes.push_back(dt(x));
      body.param_shapes.push_back(sh(x));
    }
    auto g = child(body);
    std::vector<int> params;
    params.push_back(
        g->add_param(0, static_cast<double>(std::max(std::abs(lo), std::abs(hi)) + 1)));
    for (size_t j = 0; j < init.size(); ++j)
      params.push_back(g->add_param(static_cast<int>(j + 1), carry_bound(dt(init[j]))));
    g->body_ops(uni(2, 10));
    std::vector<double> bounds;
    for (int j = 0; j < nc; ++j) {
      int c = g->next_carry(params[static_cast<size_t>(j + 1)], g->pick_any());
      if (c < 0) return -1;
      body.outputs.push_back(c);
      bounds.push_back(carry_bound(dt(init[static_cast<size_t>(j)])));
    }
    n.bodies.push_back(std::move(body));
    int m = add(n, 0);
    if (m < 0) return -1;
    std::vector<int> r = projections(m, bounds);
    return r.empty() ? -1 : r.back();
  }

  int gen_while() {
    Node n;
    n.op = Op::While;
    int counter = chance(0.5) ? full(DType::int64, {}, 0) : int_input(DType::int64, {}, 0, 1);
    if (counter < 0) return -1;
    std::vector<int> init = {counter};
    const int nc = uni(1, 2);
    for (int j = 0; j < nc; ++j) {
      int c = carry_init();
      if (c < 0) return -1;
      init.push_back(c);
    }
    // the trip count's limit: a literal, or a tensor captured from outside
    int limit = -1;
    if (chance(0.6)) {
      limit = pick(
          [&](int i) { return N(i).op == Op::Input && dt(i) == DType::int64 && sh(i).empty(); });
      if (limit < 0) limit = int_input(DType::int64, {}, 0, 4);
    }
    n.in = init;
    Program body;
    for (int x : init) {
      body.param_dtypes.push_back(dt(x));
      body.param_shapes.push_back(sh(x));
    }
    auto g = child(body);
    std::vector<int> params;
    params.push_back(g->add_param(0, 10));
    for (size_t j = 1; j < init.size(); ++j)
      params.push_back(g->add_param(static_cast<int>(j), carry_bound(dt(init[j]))));
    g->body_ops(uni(2, 8));
    int next = g->bscalar(BK::Add, params[0], 1, DType::int64, false);
    if (next < 0) return -1;
    body.outputs.push_back(next);
    std::vector<double> bounds = {10};
    for (int j = 1; j <= nc; ++j) {
      int c = g->next_carry(params[static_cast<size_t>(j)], g->pick_any());
      if (c < 0) return -1;
      body.outputs.push_back(c);
      bounds.push_back(carry_bound(dt(init[static_cast<size_t>(j)])));
    }
    int cond;
    if (limit >= 0) {
      Node o;
      o.op = Op::Outer;
      o.ints = {limit};
      int lim = g->add(o, 4);
      cond = lim < 0 ? -1 : g->binary(BK::Lt, params[0], lim);
    } else {
      cond = g->bscalar(BK::Lt, params[0], uni(1, 4), DType::int64, false);
    }
    if (cond < 0) return -1;
    body.outputs.push_back(cond);
    n.bodies.push_back(std::move(body));
    int m = add(n, 0);
    if (m < 0) return -1;
    std::vector<int> r = projections(m, bounds);
    return r.empty() ? -1 : r.back();
  }

  int gen_pure() {
    const int nargs = uni(1, 3);
    std::vector<int> args;
    for (int j = 0; j < nargs; ++j) {
      int x = pick([&](int i) { return bool_ok(i); });
      if (x < 0) return -1;
      args.push_back(x);
    }
    Node n;
    n.op = Op::Pure;
    n.in = args;
    const bool st = chance(0.3);
    n.f = st ? one_of(std::vector<double>{0.5, 2, 3}) : 0;
    n.ints = {shared_.next_group++, st ? 1 : 0};
    Program body;
    for (int x : args) {
      body.param_dtypes.push_back(dt(x));
      body.param_shapes.push_back(sh(x));
    }
    auto g = child(body);
    g->has_static = st;
    g->static_value = n.f;
    for (size_t j = 0; j < args.size(); ++j)
      g->add_param(static_cast<int>(j), bound[static_cast<size_t>(args[j])]);
    g->body_ops(uni(2, 10));
    const int nout = uni(1, 2);
    std::vector<double> bounds;
    for (int j = 0; j < nout; ++j) {
      // prefer the latest nodes
      int y = g->size() - 1 - std::min(g->size() - 1, uni(0, 3));
      if (is_multi(g->N(y).op)) y = g->pick_any();
      if (y < 0) return -1;
      body.outputs.push_back(y);
      bounds.push_back(g->bound[static_cast<size_t>(y)]);
    }
    n.bodies.push_back(body);
    Node again = n;
    int m = add(n, 0);
    if (m < 0) return -1;
    std::vector<int> r = projections(m, bounds);
    if (chance(0.4)) {
      // the same function called again on other tensors of the same signature
      again.in.clear();
      for (int x : args) {
        int y = pick([&](int i) { return i != x && dt(i) == dt(x) && sh(i) == sh(x); });
        if (y < 0) y = input(dt(x), sh(x));
        if (y < 0) return r.back();
        y = fit(y, bound[static_cast<size_t>(x)]);
        if (y < 0 || dt(y) != dt(x)) return r.back();
        again.in.push_back(y);
      }
      int m2 = add(again, 0);
      if (m2 >= 0) r = projections(m2, bounds);
    }
    return r.back();
  }

  // One op of a random family; -1 if it could not be made.
  int gen_op() {
    struct F {
      const char* name;
      int weight;
      std::function<int()> make;
    };
    const bool body = parent_ != nullptr;
    std::vector<F> fams = {
        {"unary", 14, [&] { return gen_unary(); }},
        {"binary", 14, [&] { return gen_binary(); }},
        {"binary", 8, [&] { return gen_scalar_binary(); }},
        {"compare", grad_ ? 0 : 4, [&] { return gen_compare(); }},
        {"where", 5, [&] { return gen_where(); }},
        {"cast", 6, [&] { return gen_cast(); }},
        {"reshape", 5, [&] { return gen_reshape(); }},
        {"transpose", 3, [&] { return gen_transpose(); }},
        {"permute", 3, [&] { return gen_permute(); }},
        {"broadcast", 3, [&] { return gen_broadcast(); }},
        {"slice", 4, [&] { return gen_slice(); }},
        {"select", 2, [&] { return gen_select(); }},
        {"squeeze", 2, [&] { return gen_squeeze(); }},
        {"concat", 3, [&] { return gen_concat(); }},
        {"stack", 2, [&] { return gen_stack(); }},
        {"index_select", 2, [&] { return gen_index_select(); }},
        {"index_add", 2, [&] { return gen_index_add(); }},
        {"sum", 4, [&] { return gen_reduce(Op::Sum); }},
        {"mean", 2, [&] { return gen_reduce(Op::Mean); }},
        {"amax", 2, [&] { return gen_reduce(Op::Amax); }},
        {"softmax", pal_ == Palette::Int ? 0 : 3, [&] { return gen_softmax(); }},
        {"matmul", 5, [&] { return gen_matmul(); }},
        {"random", grad_ || body ? 0 : 2, [&] { return gen_random(); }},
        {"arange", 1, [&] { return gen_arange(); }},
        {"full", grad_ ? 0 : 1, [&] { return gen_full(); }},
        {"reuse", 3, [&] { return gen_reuse(); }},
        {"scan", depth_ < 2 ? 2 : 0, [&] { return gen_scan(); }},
        {"fori", depth_ < 2 ? 2 : 0, [&] { return gen_fori(); }},
        {"while", depth_ < 2 && !grad_ ? 1 : 0, [&] { return gen_while(); }},
        {"pure", depth_ < 2 ? 2 : 0, [&] { return gen_pure(); }},
    };
    int total = 0;
    for (const F& f : fams)
      if (!off(f.name)) total += f.weight;
    if (total == 0) return -1;
    int r = uni(0, total - 1);
    for (const F& f : fams) {
      if (off(f.name) || f.weight == 0) continue;
      if (r < f.weight) {
        const size_t before = p_.nodes.size();
        int x = f.make();
        if (x < 0) {
          // a failed attempt may leave helper nodes; they are dead code, but keep bodies
          // small: drop what it added
          p_.nodes.resize(before);
          bound.resize(before);
        }
        return x;
      }
      r -= f.weight;
    }
    return -1;
  }

  Program& program() { return p_; }

 private:
  Rng& rng_;
  const GenOptions& opt_;
  Program& p_;
  Gen* parent_;
  int depth_;
  bool grad_;
  Palette pal_;
  Shared& shared_;
};

}  // namespace

const std::set<std::string>& family_names() {
  return kFamilies;
}

Generated generate(uint64_t seed, const GenOptions& options) {
  Rng rng(seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL);
  Generated out;
  out.grad = options.grad >= 0 ? options.grad == 1 : rng() % 3 == 0;
  Palette pal;
  if (out.grad) {
    pal = rng() % 4 == 0 ? Palette::F64 : Palette::F32;
  } else {
    const int r = static_cast<int>(rng() % 20);
    pal = r < 7    ? Palette::F32
          : r < 9  ? Palette::F64
          : r < 12 ? Palette::Half
          : r < 15 ? Palette::Int
                   : Palette::Mixed;
  }
  Shared shared;
  Program& p = out.program;
  Gen g(rng, options, p, nullptr, 0, out.grad, pal, shared);
  const int inputs = g.uni(1, 4);
  for (int i = 0; i < inputs; ++i) g.input(g.palette_dtype(), g.random_shape());
  const int r = g.uni(0, 9);
  int ops = r < 6   ? g.uni(options.min_ops, std::min(options.max_ops, 20))
            : r < 9 ? g.uni(std::min(options.max_ops, 20), std::min(options.max_ops, 40))
                    : g.uni(std::min(options.max_ops, 40), options.max_ops);
  ops = std::max(ops, options.min_ops);
  const int target = g.size() + ops;
  for (int tries = 0; g.size() < target && tries < ops * 10; ++tries) g.gen_op();
  // outputs: the sinks that are not inputs, and a few intermediates
  std::vector<char> used(p.nodes.size(), 0);
  for (const Node& n : p.nodes)
    for (int x : n.in) used[static_cast<size_t>(x)] = 1;
  std::vector<int> sinks;
  for (int i = 0; i < g.size(); ++i) {
    const Op op = p.nodes[static_cast<size_t>(i)].op;
    if (!used[static_cast<size_t>(i)] && op != Op::Input && !is_multi(op)) sinks.push_back(i);
  }
  if (sinks.size() > 6) sinks.erase(sinks.begin(), sinks.end() - 6);
  p.outputs = sinks;
  const int extra = g.uni(0, 2);
  for (int j = 0; j < extra; ++j) {
    int x = g.pick([&](int i) { return p.nodes[static_cast<size_t>(i)].op != Op::Input; });
    if (x >= 0 && std::find(p.outputs.begin(), p.outputs.end(), x) == p.outputs.end())
      p.outputs.push_back(x);
  }
  if (p.outputs.empty()) {
    for (int i = g.size() - 1; i >= 0; --i)
      if (!is_multi(p.nodes[static_cast<size_t>(i)].op)) {
        p.outputs.push_back(i);
        break;
      }
  }
  if (!options.without.count("materialize"))
    for (Node& n : p.nodes)
      if (!is_multi(n.op) && n.op != Op::Input && g.chance(0.04)) n.materialize = true;
  dead_code(p);
  return out;
}

}  // namespace fuzz
