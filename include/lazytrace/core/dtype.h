#pragma once
/** Element types and PyTorch's type-promotion rules. */
#include <cstddef>
#include <cstdint>
#include <string>

namespace lazytrace {

enum class DType : uint8_t { float32, float64, float16, bfloat16, int32, int64, bool_ };

inline constexpr DType float32 = DType::float32;
inline constexpr DType float64 = DType::float64;
inline constexpr DType float16 = DType::float16;
inline constexpr DType bfloat16 = DType::bfloat16;
inline constexpr DType int32 = DType::int32;
inline constexpr DType int64 = DType::int64;
inline constexpr DType bool_ = DType::bool_;

/** Bytes per element as stored (float16 and bfloat16 take 2). */
size_t itemsize(DType t);
/** "float32", "bfloat16", ... */
const char* dtype_name(DType t);
/** "f32", "bf16", "i64", "bool": the short form used in graph dumps and errors. */
const char* dtype_short(DType t);
inline bool is_floating(DType t) {
  return t <= DType::bfloat16;
}
inline bool is_integral(DType t) {
  return t == DType::int32 || t == DType::int64;
}

/** torch.promote_types: the smallest type both a and b convert to. */
DType promote_types(DType a, DType b);

/** Maps a C++ element type to its DType (float, double, int32_t, int64_t, bool). */
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::float32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::float64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::int32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::int64;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::bool_;
}

}  // namespace lazytrace
