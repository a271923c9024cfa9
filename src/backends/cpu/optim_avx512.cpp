// optim_loops.h's float32 loops compiled with AVX-512 (see src/CMakeLists.txt: 512-bit
// vectors, no FMA contraction, so the lanes compute the baseline's bits); optim.cpp calls
// them only where has_avx512(). Only always-inlined code from the headers ends up here, so
// the linker can never pick an AVX-512 copy of a function that other files use too.
#include "backends/cpu/optim_loops.h"

namespace lazytrace::cpu {

void adamw_range_f32_avx512(const float* p, const float* g, const float* m, const float* v,
                            float* po, float* mo, float* vo, AdamWNumbers<float> k, int64_t n) {
  adamw_range<float>(p, g, m, v, po, mo, vo, k, n);
}

void adamw_in_place_f32_avx512(float* p, const float* g, float* m, float* v, AdamWNumbers<float> k,
                               int64_t n) {
  adamw_in_place<float>(p, g, m, v, k, n);
}

}  // namespace lazytrace::cpu
