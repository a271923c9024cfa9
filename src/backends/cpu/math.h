#pragma once
// The math of every elementwise op, defined once. The fused kernel applies these over
// tiles; nothing else computes elementwise results.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "core/check.h"
#include "ir/op.h"

namespace lazytrace::cpu::math {

// Always inlined into the kernel loops, including their AVX2 versions (fused.cpp), so those
// loops vectorize instead of calling a baseline copy once per element.
#define LT_MATH_INLINE [[gnu::always_inline]] inline

/**
 * c ? a : b on floats by bit masks. GCC does not if-convert some chains of float ?: when it
 * targets AVX2 (elementwise_avx2.cpp), and the loop around them then stays scalar.
 */
LT_MATH_INLINE float select(bool c, float a, float b) {
  uint32_t ab, bb;
  std::memcpy(&ab, &a, sizeof ab);
  std::memcpy(&bb, &b, sizeof bb);
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  const uint32_t r = (ab & m) | (bb & ~m);
  float out;
  std::memcpy(&out, &r, sizeof out);
  return out;
}

/**
 * a * b + c rounded once (IEEE 754 fusedMultiplyAdd): the same bits on every CPU, one
 * instruction in the AVX2 and AVX-512 copies (built with FMA), the C library's fmaf in the
 * baseline one. Written out, never contracted by the compiler (-ffp-contract=off).
 */
LT_MATH_INLINE float fma(float a, float b, float c) {
  return std::fma(a, b, c);
}

constexpr float kExpHi = 88.72283f, kExpLo = -87.33654f;  // exp_f32's range

// exp_f32's steps (below) for an x in range, not NaN: n, the nearest integer to x / ln2 ...
LT_MATH_INLINE float exp_n(float x) {
  // adding 1.5 * 2^23 rounds to an integer, to nearest, the same on every CPU
  constexpr float kRound = 12582912.0f;
  return (x * 1.44269504088896341f + kRound) - kRound;
}

// exp's polynomial P, highest degree first: e^r - 1 = r + r^2 P(r) for |r| <= ln2 / 2
// (fitted in float64: 3.1e-9 relative to e^r; docs/bench-results/issue22/scratch/fits.py
// exp 4). The native code (jit_elementwise.cpp) reads it too.
inline constexpr float kExpP[] = {0.0013814551057294011f, 0.00836869329214096f,
                                  0.04166838526725769f, 0.1666652113199234f, 0.4999999403953552f};

// ... then e^r - 1 from r = x - n ln2 ...
LT_MATH_INLINE float expm1_of_r(float r) {
  float p = kExpP[0];
#pragma GCC unroll 16
  for (size_t i = 1; i < std::size(kExpP); ++i) p = fma(p, r, kExpP[i]);
  return fma(p, r * r, r);
}

// ... r by Cody-Waite's two-part ln2, exact in n ln2's first part for any n in range ...
LT_MATH_INLINE float reduce(float xc, float fn) {
  return fma(fn, 2.12194440e-4f, fma(fn, -0.693359375f, xc));
}

// ... v 2^n, by n added to v's exponent bits: exact wherever v 2^n is a normal float, as it is
// for e^r and every n from a clamped x (from -126, where e^r > 1, to 128, where e^r < 1) ...
LT_MATH_INLINE float times_pow2(float v, float fn) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits += static_cast<uint32_t>(static_cast<int32_t>(fn)) << 23;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// ... and e^x from r and n, or from x and n
LT_MATH_INLINE float exp_from_r(float r, float fn) {
  return times_pow2(expm1_of_r(r) + 1.0f, fn);
}
LT_MATH_INLINE float exp_from_n(float xc, float fn) {
  return exp_from_r(reduce(xc, fn), fn);
}

// e^x for x clamped to exp_f32's range (NaN stays NaN)
LT_MATH_INLINE float exp_clamped(float x) {
  // every ?: as a mask (select) or an integer, not a float ?:, which GCC vectorizes less
  // well
  const float xc = select(x > kExpHi, kExpHi, select(x < kExpLo, kExpLo, x));
  return exp_from_n(xc, exp_n(xc));
}

/**
 * exp for float32 without a libm call, so loops over it vectorize: x = n ln2 + r with n the
 * nearest integer (|r| <= ln2 / 2), Cody-Waite's two-part ln2, a degree-6 polynomial in FMA,
 * times 2^n by its exponent bits. Within 1.02 ulps of exp over every float of its range. Results
 * below 2^-126 are 0.
 */
LT_MATH_INLINE float exp_f32(float x) {
  float y = exp_clamped(x);
  y = select(x > kExpHi, HUGE_VALF, y);
  y = select(x < kExpLo, 0.0f, y);
  return select(x != x, x, y);
}

// tanh_f32's steps (below): e^2|x| + 1, without exp's clamps: beyond 2|x| = 20,
// 2 / (e^2|x| + 1) < 2^-27 and tanh rounds to 1 either way. With n at most 29, r by ln2 in
// one part: e^2|x| then errs by at most 29 * 1.9e-9 of itself (ln2's rounding to float),
// and tanh, which takes 2 / (e^2|x| + 1) of it, by less than 0.01 ulp ...
LT_MATH_INLINE float tanh_denominator(float x) {
  const float ax2 = 2.0f * (x < 0 ? -x : x);
  const float e = select(ax2 > 20.0f, 20.0f, ax2);
  const float fn = exp_n(e);
  return exp_from_r(fma(fn, -0.693147182f, e), fn) + 1.0f;
}

// tanh's polynomial P near 0, highest degree first: tanh(x) = x + x z P(z), z = x^2, for
// |x| < 0.625. The native code (jit_elementwise.cpp) reads it too.
inline constexpr float kTanhP[] = {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f,
                                   1.33314422036e-1f, -3.33332819422e-1f};

// ... then tanh from x and that: an odd polynomial for |x| < 0.625, 1 - 2 / it beyond, with
// x's sign (the polynomial's is x's but at -0, where it gives +0; a NaN takes the
// polynomial, which keeps it)
LT_MATH_INLINE float tanh_from(float x, float denominator) {
  const float ax = x < 0 ? -x : x;
  const float z = x * x;
  float small = kTanhP[0];
#pragma GCC unroll 16
  for (size_t i = 1; i < std::size(kTanhP); ++i) small = fma(small, z, kTanhP[i]);
  small = fma(small * z, x, x);
  const float big = 1.0f - 2.0f / denominator;
  return std::copysign(select(!(ax >= 0.625f), small, big), x);
}

/** tanh for float32, vectorizable: an odd polynomial near 0, 1 - 2/(e^2|x| + 1) beyond. */
LT_MATH_INLINE float tanh_f32(float x) {
  return tanh_from(x, tanh_denominator(x));
}

// erf_f32's polynomials, highest degree first (the native code, jit_elementwise.cpp, reads
// them too): P in x^2, its constant 2 / sqrt(pi) - 1 (the 1 is added exactly) ...
inline constexpr float kErfP[] = {
    7.854108844185248e-05f, -0.0008010264136828482f, 0.005188335198909044f, -0.026853814721107483f,
    0.1128358542919159f,    -0.3761262595653534f,    0.12837916612625122f};
// ... and Q in y = (|x| - 2.5) / 1.5, fitted to erfc's absolute error (what erf's ulps
// see), not to its relative one
inline constexpr float kErfQ[] = {
    0.002737881848588586f,  0.0038440378848463297f, 0.006187010556459427f,
    -0.005021230783313513f, 0.01165649015456438f,   -0.027446145191788673f,
    0.056057967245578766f,  -0.11151327937841415f,  0.21080760657787323f};

/**
 * erf for float32, vectorizable: x + x P(x^2) for |x| < 1; 1 - e^-x^2 Q(|x|) beyond, with
 * |x| clamped to 4, where erf rounds to 1 (P fitted to erf / x in float64, 1.2e-9 relative;
 * Q to e^x^2 erfc(x), erfc within 2.4e-9; docs/bench-results/issue22/scratch/fits.py). Within
 * 1.05 ulps of erf over every float (16 floats above 1 ulp; libm's erff: 0.97).
 */
LT_MATH_INLINE float erf_f32(float x) {
  const float a = std::fabs(x);
  const float z = a * a;
  float p = kErfP[0];
#pragma GCC unroll 16
  for (size_t i = 1; i < std::size(kErfP); ++i) p = fma(p, z, kErfP[i]);
  const float small = fma(a, p, a);
  const float b = select(a < 4.0f, a, 4.0f);
  const float y = fma(b, 0.6666666666666666f, -1.6666666666666667f);
  float q = kErfQ[0];
#pragma GCC unroll 16
  for (size_t i = 1; i < std::size(kErfQ); ++i) q = fma(q, y, kErfQ[i]);
  const float e = -(b * b);
  const float big = fma(-exp_from_n(e, exp_n(e)), q, 1.0f);
  return std::copysign(select(!(a >= 1.0f), small, big), x);  // a NaN: small, NaN
}

// log_f32's polynomial P, highest degree first: log(1 + f) = f - f^2 / 2 + f^3 P(f) for f in
// [sqrt(1/2) - 1, sqrt(2) - 1] (fitted in float64: 5.9e-9 relative to log(1 + f))
inline constexpr float kLogP[] = {
    -0.07633980363607407f, 0.12760871648788452f, -0.13160043954849243f, 0.14201845228672028f,
    -0.16623379290103912f, 0.2000122368335724f,  -0.2500081956386566f,  0.3333333134651184f};

/**
 * log for float32, vectorizable: x = 2^k m with m in [sqrt(1/2), sqrt(2)) (subnormals scaled
 * by 2^23 first), then k ln2 (Cody-Waite's two parts) + log(1 + f) for f = m - 1 (exact).
 * Within 0.93 ulps of log over every positive float (libm's logf: 0.82).
 */
LT_MATH_INLINE float log_f32(float x) {
  const bool tiny = x < 1.17549435e-38f;  // subnormal, or not positive (fixed below)
  const float xs = select(tiny, x * 8388608.0f, x);
  uint32_t ix;
  std::memcpy(&ix, &xs, sizeof ix);
  ix += 0x3f800000u - 0x3f3504f3u;  // the exponent of m's range [sqrt(1/2), sqrt(2))
  const float k = static_cast<float>(static_cast<int32_t>(ix >> 23) - 127 - (tiny ? 23 : 0));
  ix = (ix & 0x007fffffu) + 0x3f3504f3u;
  float m;
  std::memcpy(&m, &ix, sizeof m);
  const float f = m - 1.0f;
  float p = kLogP[0];
#pragma GCC unroll 16
  for (size_t i = 1; i < std::size(kLogP); ++i) p = fma(p, f, kLogP[i]);
  const float t = f * f * fma(f, p, -0.5f);  // log(1 + f) - f
  float r = fma(k, 0.693359375f, fma(k, -2.12194440e-4f, t) + f);
  r = select(x == 0.0f, -HUGE_VALF, r);
  r = select(x == HUGE_VALF, HUGE_VALF, r);
  r = select(x < 0.0f, NAN, r);
  return select(x != x, x, r);
}

/**
 * log1p for float32, vectorizable: log(u) for u = 1 + x rounded, corrected by
 * (x - (u - 1)) / u, what the rounding lost; x itself where u rounds to 1. Within 1.44 ulps
 * of log1p over every float above -1 (libm's log1pf: 1.29).
 */
LT_MATH_INLINE float log1p_f32(float x) {
  const float u = 1.0f + x;
  const float l = log_f32(u);
  const float y = select(u == 1.0f, x, l + (x - (u - 1.0f)) / u);
  return select(u <= 0.0f || u == HUGE_VALF || x != x, l, y);  // -inf, NaN, inf: log's
}

template <typename T>
LT_MATH_INLINE T erf(T x) {
  if constexpr (std::is_same_v<T, float>)
    return erf_f32(x);
  else
    return std::erf(x);
}

template <typename T>
LT_MATH_INLINE T exp(T x) {
  if constexpr (std::is_same_v<T, float>)
    return exp_f32(x);
  else
    return std::exp(x);
}

template <typename T>
LT_MATH_INLINE T sigmoid(T x) {
  if constexpr (std::is_same_v<T, float>) {
    // 1 / (1 + e^-x) without exp's fix-ups: below its range e^-x is 2^-126 here, not 0, and
    // 1 / (1 + 2^-126) rounds to 1 all the same; above it the result is 0, as 1 / (1 + inf).
    // The same bits as through exp_f32 for every float but NaN.
    return select(-x > kExpHi, 0.0f, 1.0f / (1.0f + exp_clamped(-x)));
  } else {
    return T(1) / (T(1) + math::exp(-x));
  }
}

template <typename T>
LT_MATH_INLINE T unary(ir::OpKind op, T x) {
  using K = ir::OpKind;
  switch (op) {
    case K::Neg:
      return -x;
    case K::Exp:
      return math::exp(x);
    case K::Log:
      if constexpr (std::is_same_v<T, float>)
        return log_f32(x);
      else
        return std::log(x);
    case K::Log1p:
      if constexpr (std::is_same_v<T, float>)
        return log1p_f32(x);
      else
        return std::log1p(x);
    case K::Sin:
      return std::sin(x);
    case K::Cos:
      return std::cos(x);
    case K::Tanh:
      if constexpr (std::is_same_v<T, float>)
        return tanh_f32(x);
      else
        return std::tanh(x);
    case K::Sigmoid:
      return sigmoid(x);
    case K::Relu:
      return (x > T(0) || x != x) ? x : T(0);  // NaN stays NaN, as in PyTorch
    case K::Gelu:
      return T(0.5) * x * (T(1) + math::erf(x * T(0.70710678118654752440)));
    case K::Silu:
      return x * sigmoid(x);
    case K::Sqrt:
      return std::sqrt(x);
    case K::Rsqrt:
      return T(1) / std::sqrt(x);
    case K::Abs:
      if constexpr (std::is_floating_point_v<T>)
        return std::fabs(x);  // clears the sign of -0.0, as std::abs and PyTorch do
      else
        return x < T(0) ? -x : x;
    case K::Erf:
      return math::erf(x);
#define LT_OP(kind, name, family, arity) case K::kind:
#define LT_UNARY_OP(kind, name)
#include "ir/ops.def"
      break;
  }
  LT_UNREACHABLE("math::unary computes a unary op");
}

/** Integer pow with PyTorch's semantics for non-negative exponents; x**-n is 0 unless |x| == 1. */
inline int64_t ipow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp % 2 == 0) ? 1 : -1;
    return 0;
  }
  int64_t r = 1;
  while (exp) {
    if (exp & 1) r *= base;
    base *= base;
    exp >>= 1;
  }
  return r;
}

// Python's a // b and a % b. Integers exactly (b = 0: -1 and a, as XLA; the most negative
// value // -1 wraps to itself, remainder 0); floats as CPython's float_floor_div and
// float_rem, from fmod (the exact remainder), so 7.0 // 0.1 is 69 and 7.0 % 0.1 about 0.1.
template <typename T>
LT_MATH_INLINE T floor_divide(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return T(-1);
    if (b == T(-1)) return static_cast<T>(T(0) - static_cast<std::make_unsigned_t<T>>(a));
    const T q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
  } else {
    if (b == 0) return a / b;
    const T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
    if (div == 0) return std::copysign(T(0), a / b);
    T f = std::floor(div);
    if (div - f > T(0.5)) f += 1;
    return f;
  }
}
template <typename T>
LT_MATH_INLINE T remainder(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return a;
    if (b == T(-1)) return 0;
    const T r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  } else {
    T mod = std::fmod(a, b);
    if (mod != 0) {
      if ((b < 0) != (mod < 0)) mod += b;
    } else {
      mod = std::copysign(T(0), b);
    }
    return mod;
  }
}

template <typename T>
LT_MATH_INLINE T binary(ir::OpKind op, T a, T b) {
  using K = ir::OpKind;
  switch (op) {
    case K::Add:
      return a + b;
    case K::Sub:
      return a - b;
    case K::Mul:
      return a * b;
    case K::Div:
      return a / b;
    case K::Pow:
      if constexpr (std::is_integral_v<T>)
        return static_cast<T>(ipow(a, b));
      else
        return std::pow(a, b);
    // NaN propagates, as in PyTorch; -0 is below +0 (IEEE 754-2019 maximum and minimum)
    case K::Maximum:
      if constexpr (!std::is_integral_v<T>) {
        if (std::isnan(a) || std::isnan(b)) return a + b;
        if (a == b) return std::signbit(a) ? b : a;
      }
      return a > b ? a : b;
    case K::Minimum:
      if constexpr (!std::is_integral_v<T>) {
        if (std::isnan(a) || std::isnan(b)) return a + b;
        if (a == b) return std::signbit(a) ? a : b;
      }
      return a < b ? a : b;
    case K::Atan2:  // integer operands compute in float (ops/binary.cpp)
      return static_cast<T>(std::atan2(a, b));
    case K::FloorDiv:
      return floor_divide(a, b);
    case K::Remainder:
      return remainder(a, b);
#define LT_OP(kind, name, family, arity) case K::kind:
#define LT_BINARY_OP(kind, name)
#include "ir/ops.def"
      break;
  }
  LT_UNREACHABLE("math::binary computes a binary op");
}

template <typename T>
LT_MATH_INLINE bool compare(ir::OpKind op, T a, T b) {
  using K = ir::OpKind;
  switch (op) {
    case K::Eq:
      return a == b;
    case K::Ne:
      return a != b;
    case K::Lt:
      return a < b;
    case K::Le:
      return a <= b;
    case K::Gt:
      return a > b;
    case K::Ge:
      return a >= b;
#define LT_OP(kind, name, family, arity) case K::kind:
#define LT_COMPARE_OP(kind, name)
#include "ir/ops.def"
      break;
  }
  LT_UNREACHABLE("math::compare computes a comparison");
}

}  // namespace lazytrace::cpu::math
