#include "backends/cpu/value_ranges.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/math.h"

namespace lazytrace::cpu {

namespace {

using ir::OpKind;

// [lo, hi] widened past float32's rounding of either bound, and a bound beyond float32's
// largest value infinite (float32 overflows there, where double went on); anything where a
// bound is NaN (inf - inf, 0 * inf)
Interval widened(double lo, double hi) {
  if (std::isnan(lo) || std::isnan(hi)) return {};
  constexpr double kRel = 0x1p-20, kAbs = 1e-37, kMax = std::numeric_limits<float>::max();
  Interval out{lo - std::fabs(lo) * kRel - kAbs, hi + std::fabs(hi) * kRel + kAbs};
  if (out.lo < -kMax) out.lo = -std::numeric_limits<double>::infinity();
  if (out.hi > kMax) out.hi = std::numeric_limits<double>::infinity();
  return out;
}

// f over [x.lo, x.hi] for an f that never decreases
template <typename F>
Interval rising(Interval x, F f) {
  return widened(f(x.lo), f(x.hi));
}

Interval product(Interval a, Interval b) {
  const double p[] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
  for (double v : p)
    if (std::isnan(v)) return {};
  return widened(*std::min_element(std::begin(p), std::end(p)),
                 *std::max_element(std::begin(p), std::end(p)));
}

Interval unary(OpKind op, Interval x) {
  using K = OpKind;
  if (op == K::Neg) return {-x.hi, -x.lo};
  if (op == K::Abs)
    return x.lo >= 0 ? x : x.hi <= 0 ? Interval{-x.hi, -x.lo} : Interval{0, std::max(-x.lo, x.hi)};
  if (op == K::Relu) return {std::max(x.lo, 0.0), std::max(x.hi, 0.0)};
  if (op == K::Exp) return rising(x, [](double v) { return std::exp(v); });
  if (op == K::Tanh) return rising(x, [](double v) { return std::tanh(v); });
  if (op == K::Sigmoid) return rising(x, [](double v) { return 1 / (1 + std::exp(-v)); });
  if (op == K::Erf) return rising(x, [](double v) { return std::erf(v); });
  if (op == K::Sqrt) return rising(x, [](double v) { return std::sqrt(std::max(v, 0.0)); });
  // x sigmoid(x) >= -0.2785 and x Phi(x) >= -0.1700; both at most max(x, 0)
  if (op == K::Silu) return widened(-0.2785, std::max(x.hi, 0.0));
  if (op == K::Gelu) return widened(-0.1700, std::max(x.hi, 0.0));
  return {};
}

Interval binary(OpKind op, Interval a, Interval b) {
  using K = OpKind;
  if (op == K::Add) return widened(a.lo + b.lo, a.hi + b.hi);
  if (op == K::Sub) return widened(a.lo - b.hi, a.hi - b.lo);
  if (op == K::Mul) return product(a, b);
  if (op == K::Div && (b.lo > 0 || b.hi < 0)) return product(a, {1 / b.hi, 1 / b.lo});
  return {};
}

}  // namespace

std::vector<Interval> value_ranges(const FusedStep& st,
                                   const std::vector<std::optional<double>>& single) {
  std::vector<Interval> out(st.program.size());
  std::vector<Interval> reg(static_cast<size_t>(std::max(st.num_regs, 1)));
  auto at = [&](int r) { return reg[static_cast<size_t>(r)]; };
  for (size_t i = 0; i < st.program.size(); ++i) {
    const Instr& ins = st.program[i];
    Interval v;
    if (ins.op == OpKind::Data) {
      const auto l = static_cast<size_t>(ins.load);
      if (st.loads[l].dtype == DType::bool_)
        v = {0, 1};
      else if (l < single.size() && single[l])
        v = {*single[l], *single[l]};
    } else if (ir::is_compare(ins.op)) {
      v = {0, 1};
    } else if (ins.op == OpKind::Where) {
      v = {std::min(at(ins.src[1]).lo, at(ins.src[2]).lo),
           std::max(at(ins.src[1]).hi, at(ins.src[2]).hi)};
    } else if (ins.src[1] < 0) {
      v = unary(ins.op, at(ins.src[0]));
    } else if (ins.src[2] < 0) {
      v = binary(ins.op, at(ins.src[0]), at(ins.src[1]));
    }
    out[i] = v;
    reg[static_cast<size_t>(ins.dst)] = v;
  }
  return out;
}

bool has_clamps(ir::OpKind op) {
  return op == OpKind::Exp || op == OpKind::Tanh || op == OpKind::Sigmoid || op == OpKind::Silu;
}

bool needs_no_clamps(ir::OpKind op, Interval x) {
  // exp's clamps to [kExpLo, kExpHi], where 2^n reaches 2^128 only above 88; sigmoid's and
  // silu's exp of -x; tanh's 2|x| clamped at 20
  if (op == OpKind::Exp) return x.lo >= math::kExpLo && x.hi <= 88.0;
  if (op == OpKind::Sigmoid || op == OpKind::Silu) return x.lo >= -88.0 && x.hi <= -math::kExpLo;
  if (op == OpKind::Tanh) return x.lo >= -10.0 && x.hi <= 10.0;
  return false;
}

}  // namespace lazytrace::cpu
