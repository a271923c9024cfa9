#pragma once
// The AdamW update loops: always inlined, so each file that includes this compiles its own
// copy for its instruction set: optim.cpp for the baseline, optim_avx2.cpp and
// optim_avx512.cpp for float32 (no FMA: every CPU computes the same bits).
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace lazytrace::cpu {

template <typename S>
using compute_t = std::conditional_t<std::is_same_v<S, double>, double, float>;

// Rounds to what S holds, as the same ops one by one would after each operation (a no-op
// for float and double).
template <typename S>
[[gnu::always_inline]] inline compute_t<S> round_to(compute_t<S> x) {
  if constexpr (std::is_same_v<S, compute_t<S>>)
    return x;
  else
    return static_cast<compute_t<S>>(S(x));
}

template <typename S>
struct AdamWNumbers {
  compute_t<S> decay, step, inv, b1, c1, b2, c2, eps;
};

// One element: every input read before any output is written, so outputs may be the
// inputs' own buffers (donated: Program::donations).
template <typename S>
[[gnu::always_inline]] inline void adamw_one(const S& p, const S& g, const S& m, const S& v,
                                             const AdamWNumbers<S>& k, S& po, S& mo, S& vo) {
  using C = compute_t<S>;
  constexpr auto r = round_to<S>;
  const C gi = static_cast<C>(g), pi = static_cast<C>(p);
  const C mi = r(r(k.b1 * static_cast<C>(m)) + r(k.c1 * gi));
  const C vi = r(r(k.b2 * static_cast<C>(v)) + r(k.c2 * r(gi * gi)));
  const C denom = r(r(r(std::sqrt(vi)) * k.inv) + k.eps);
  mo = S(mi);
  vo = S(vi);
  po = S(r(r(pi * k.decay) - r(r(k.step * mi) / denom)));
}

// Arguments by value and restrict pointers, so the loops vectorize: new buffers, or the
// inputs' own (all three donated; optim.cpp copies the inputs of the others where only some
// are).
template <typename S>
[[gnu::always_inline]] inline void adamw_range(const S* __restrict p, const S* __restrict g,
                                               const S* __restrict m, const S* __restrict v,
                                               S* __restrict po, S* __restrict mo, S* __restrict vo,
                                               AdamWNumbers<S> k, int64_t n) {
  for (int64_t i = 0; i < n; ++i) adamw_one<S>(p[i], g[i], m[i], v[i], k, po[i], mo[i], vo[i]);
}

template <typename S>
[[gnu::always_inline]] inline void adamw_in_place(S* __restrict p, const S* __restrict g,
                                                  S* __restrict m, S* __restrict v,
                                                  AdamWNumbers<S> k, int64_t n) {
  for (int64_t i = 0; i < n; ++i) adamw_one<S>(p[i], g[i], m[i], v[i], k, p[i], m[i], v[i]);
}

// The AVX2 and AVX-512 copies for float32 (optim_avx2.cpp, optim_avx512.cpp). Call only
// where has_avx2() / has_avx512() (cpu_features.h).
void adamw_range_f32_avx2(const float* p, const float* g, const float* m, const float* v, float* po,
                          float* mo, float* vo, AdamWNumbers<float> k, int64_t n);
void adamw_in_place_f32_avx2(float* p, const float* g, float* m, float* v, AdamWNumbers<float> k,
                             int64_t n);
void adamw_range_f32_avx512(const float* p, const float* g, const float* m, const float* v,
                            float* po, float* mo, float* vo, AdamWNumbers<float> k, int64_t n);
void adamw_in_place_f32_avx512(float* p, const float* g, float* m, float* v, AdamWNumbers<float> k,
                               int64_t n);

}  // namespace lazytrace::cpu
