#pragma once
// The math of every elementwise op, defined once. The fused kernel applies these over
// tiles; nothing else computes elementwise results.
#include <cmath>
#include <cstdint>

#include "ir/op.h"

namespace lazytrace::cpu::math {

template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <typename T>
inline T unary(ir::OpKind op, T x) {
  using K = ir::OpKind;
  switch (op) {
    case K::Neg: return -x;
    case K::Exp: return std::exp(x);
    case K::Log: return std::log(x);
    case K::Sin: return std::sin(x);
    case K::Cos: return std::cos(x);
    case K::Tanh: return std::tanh(x);
    case K::Sigmoid: return sigmoid(x);
    case K::Relu: return (x > T(0) || x != x) ? x : T(0);  // NaN stays NaN, as in PyTorch
    case K::Gelu: return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
    case K::Silu: return x * sigmoid(x);
    case K::Sqrt: return std::sqrt(x);
    case K::Rsqrt: return T(1) / std::sqrt(x);
    case K::Abs: return x < T(0) ? -x : x;
    default: return x;
  }
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

template <typename T>
inline T binary(ir::OpKind op, T a, T b) {
  using K = ir::OpKind;
  switch (op) {
    case K::Add: return a + b;
    case K::Sub: return a - b;
    case K::Mul: return a * b;
    case K::Div: return a / b;
    case K::Pow:
      if constexpr (std::is_integral_v<T>)
        return static_cast<T>(ipow(a, b));
      else
        return std::pow(a, b);
    case K::Maximum:
      if constexpr (!std::is_integral_v<T>)
        if (std::isnan(a) || std::isnan(b)) return a + b;  // NaN propagates, as in PyTorch
      return a > b ? a : b;
    case K::Minimum:
      if constexpr (!std::is_integral_v<T>)
        if (std::isnan(a) || std::isnan(b)) return a + b;
      return a < b ? a : b;
    default: return a;
  }
}

template <typename T>
inline bool compare(ir::OpKind op, T a, T b) {
  using K = ir::OpKind;
  switch (op) {
    case K::Eq: return a == b;
    case K::Ne: return a != b;
    case K::Lt: return a < b;
    case K::Le: return a <= b;
    case K::Gt: return a > b;
    case K::Ge: return a >= b;
    default: return false;
  }
}

}  // namespace lazytrace::cpu::math
