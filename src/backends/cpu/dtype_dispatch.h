#pragma once
// Storage types per DType, and dispatch from a runtime DType to a templated body.
#include <cstdint>

#include "lazytrace/core/dtype.h"
#include "lazytrace/core/error.h"
#include "lazytrace/core/half.h"

namespace lazytrace::cpu {

template <typename T>
struct Tag {
  using type = T;
};

/** Calls f(Tag<StorageType>{}) for the dtype. */
template <typename F>
decltype(auto) dispatch(DType d, F&& f) {
  switch (d) {
    case DType::float32:
      return f(Tag<float>{});
    case DType::float64:
      return f(Tag<double>{});
    case DType::float16:
      return f(Tag<Half>{});
    case DType::bfloat16:
      return f(Tag<BFloat16>{});
    case DType::int32:
      return f(Tag<int32_t>{});
    case DType::int64:
      return f(Tag<int64_t>{});
    case DType::bool_:
      return f(Tag<bool>{});
  }
  fail("cpu", "unknown dtype");
}

/** The type registers hold for a dtype: float for f32/f16/bf16, double, or int64. */
enum class Compute : uint8_t { F32, F64, I64 };
inline Compute compute_of(DType d) {
  if (d == DType::float64) return Compute::F64;
  if (is_floating(d)) return Compute::F32;
  return Compute::I64;
}

template <typename F>
decltype(auto) dispatch_compute(Compute c, F&& f) {
  switch (c) {
    case Compute::F32:
      return f(Tag<float>{});
    case Compute::F64:
      return f(Tag<double>{});
    case Compute::I64:
      return f(Tag<int64_t>{});
  }
  return f(Tag<float>{});
}

/** Element conversion between storage and compute types. */
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, bool> &&
                (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>))
    return static_cast<float>(v) != 0.0f;
  else if constexpr (std::is_same_v<To, bool>)
    return v != From(0);
  else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>)
    return static_cast<To>(static_cast<float>(v));
  else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>)
    return To(static_cast<float>(v));
  else
    return static_cast<To>(v);
}

}  // namespace lazytrace::cpu
