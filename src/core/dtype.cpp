#include "lazytrace/core/dtype.h"

namespace lazytrace {

size_t itemsize(DType t) {
  switch (t) {
    case DType::float32:
      return 4;
    case DType::float64:
      return 8;
    case DType::float16:
      return 2;
    case DType::bfloat16:
      return 2;
    case DType::int32:
      return 4;
    case DType::int64:
      return 8;
    case DType::bool_:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  static const char* names[] = {"float32", "float64", "float16", "bfloat16",
                                "int32",   "int64",   "bool"};
  return names[static_cast<int>(t)];
}

const char* dtype_short(DType t) {
  static const char* names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "bool"};
  return names[static_cast<int>(t)];
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::bool_) return b;
  if (b == DType::bool_) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (!fa) return DType::int64;  // int32 with int64
  // two different floating types
  if (a == DType::float64 || b == DType::float64) return DType::float64;
  return DType::float32;  // f16+bf16, f16+f32, bf16+f32
}

}  // namespace lazytrace
