#pragma once
/** float16 and bfloat16 storage types: 16 bits stored, computed in float32. */
#include <cstdint>
#include <cstring>

namespace lazytrace {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

/** IEEE binary16 with round-to-nearest-even conversion from float. */
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }

  static uint16_t from_float(float f) {
#if defined(__F16C__) || defined(__FLT16_MAX__)
    _Float16 h = static_cast<_Float16>(f);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
#else
    uint32_t x = float_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)
      return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
    if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
    if (ax < 0x38800000u) {  // subnormal or zero in half
      float v = bits_to_float(ax) + 0.5f;
      return static_cast<uint16_t>(sign | (float_to_bits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (ax >> 13) & 1u;
    ax += 0xc8000fffu + mant_odd;
    return static_cast<uint16_t>(sign | (ax >> 13));
#endif
  }
  static float to_float(uint16_t h) {
#if defined(__F16C__) || defined(__FLT16_MAX__)
    _Float16 v;
    std::memcpy(&v, &h, 2);
    return static_cast<float>(v);
#else
    uint32_t sign = (h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) return bits_to_float(sign) + (sign ? -1.f : 1.f) * mant * (1.0f / 16777216.0f);
    if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));
    return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
#endif
  }
};

/** bfloat16: the upper 16 bits of a float, rounded to nearest even. */
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }

  // without a branch (a NaN quieted), so that loops of it vectorize
  static uint16_t from_float(float f) {
    const uint32_t x = float_to_bits(f);
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16, quiet = (x >> 16) | 0x40u;
    return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
  static float to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }
};

}  // namespace lazytrace
