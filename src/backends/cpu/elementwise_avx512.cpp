// elementwise.h's float32 loops (and reduce_row.h's) compiled with AVX-512 (see src/CMakeLists.txt:
// 512-bit vectors, no FMA contraction, so the lanes compute the baseline's bits); fused.cpp calls
// them only where has_avx512(). Only always-inlined code from the headers ends up here, so
// the linker can never pick an AVX-512 copy of a function that other files use too.
#include "backends/cpu/elementwise.h"
#include "backends/cpu/reduce_row.h"

namespace lazytrace::cpu {

void unary_f32_avx512(ir::OpKind op, float* d, const float* a, int64_t n) {
  elementwise::unary<float>(op, d, a, n);
}

void binary_f32_avx512(ir::OpKind op, float* d, const float* a, const float* b, int64_t n) {
  elementwise::binary<float>(op, d, a, b, n);
}

void binary_scalar_f32_avx512(ir::OpKind op, float* d, const float* a, bool a_one, const float* b,
                              bool b_one, int64_t n) {
  elementwise::binary_scalar<float>(op, d, a, a_one, b, b_one, n);
}

double sum_row_f32_avx512(const float* x, int64_t n) {
  return sum_row_f32_inline(x, n);
}

float max_row_f32_avx512(const float* x, int64_t n) {
  return max_row_f32_inline(x, n);
}

}  // namespace lazytrace::cpu
