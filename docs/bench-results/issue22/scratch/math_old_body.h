#define LT_MATH_INLINE [[gnu::always_inline]] inline
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

/**
 * exp for float32 without a libm call, so loops over it vectorize: x = n ln2 + r with n the
 * nearest integer (|r| <= ln2 / 2; n at most 127, so r reaches ln2 only next to the overflow),
 * Cody-Waite's two-part ln2, Cephes' degree-6 polynomial in FMA (about 1 ulp; 5 at the top of
 * the range), 2^n by its exponent bits. Results below 2^-126 are 0.
 */
LT_MATH_INLINE float exp_f32(float x) {
  constexpr float kHi = 88.72283f, kLo = -87.33654f;
  // every ?: as a mask (select) or an integer, not a float ?:, which GCC vectorizes less
  // well
  const float xc = select(x > kHi, kHi, select(x < kLo, kLo, x));
  // adding 1.5 * 2^23 rounds to an integer, to nearest, the same on every CPU
  constexpr float kRound = 12582912.0f;
  float fn = (xc * 1.44269504088896341f + kRound) - kRound;
  fn = select(fn > 127.0f, 127.0f, fn);
  float r = fma(fn, -0.693359375f, xc);
  r = fma(fn, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fma(p, r, 1.3981999507e-3f);
  p = fma(p, r, 8.3334519073e-3f);
  p = fma(p, r, 4.1665795894e-2f);
  p = fma(p, r, 1.6666665459e-1f);
  p = fma(p, r, 5.0000001201e-1f);
  float y = fma(p, r * r, r) + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int>(fn) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  y *= scale;
  y = select(x > kHi, HUGE_VALF, y);
  y = select(x < kLo, 0.0f, y);
  return select(x != x, x, y);
}

/** tanh for float32, vectorizable: an odd polynomial near 0, 1 - 2/(e^2|x| + 1) beyond. */
LT_MATH_INLINE float tanh_f32(float x) {
  const float ax = x < 0 ? -x : x;
  const float z = x * x;
  float small = -5.70498872745e-3f;
  small = fma(small, z, 2.06390887954e-2f);
  small = fma(small, z, -5.37397155531e-2f);
  small = fma(small, z, 1.33314422036e-1f);
  small = fma(small, z, -3.33332819422e-1f);
  small = fma(small * z, x, x);
  float big = 1.0f - 2.0f / (exp_f32(2.0f * ax) + 1.0f);
  big = select(x < 0, -big, big);
  return select(ax < 0.625f, small, big);
}
