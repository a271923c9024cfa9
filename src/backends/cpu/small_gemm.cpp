// Which small-product kernel takes which layout (small_gemm.h): the rules, for every
// instruction set's kernels.
#include "backends/cpu/small_gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lazytrace::cpu {

float* small_gemm_scratch(int slot, int64_t floats) {
  thread_local std::vector<float> buffers[2];
  std::vector<float>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < floats + 16) b.resize(static_cast<size_t>(floats + 16));
  const auto at = reinterpret_cast<uintptr_t>(b.data());
  return b.data() + ((64 - at % 64) % 64) / sizeof(float);
}

namespace {

// The delta of the loop's shadow that holds [p, p + bytes), or 0.
int64_t shadow_of(const Shadows& all, const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (const Shadow* s = all.begin; s != all.end; ++s)
    if (c >= s->begin && c + bytes <= s->end) return s->delta;
  return 0;
}

}  // namespace

bool small_gemm_f32(const SmallGemmKernels& kernels, int64_t m, int64_t n, int64_t k,
                    const float* A, int64_t ars, int64_t acs, const float* B, int64_t brs,
                    int64_t bcs, float* C, int64_t ldc, ReadAhead* ahead, Shadows shadows) {
  constexpr int64_t kSmall = 32;
  if (m <= kSmall && k >= 8 && acs == 1 && brs == 1) {
    const int64_t shadow = shadow_of(shadows, B, ((n - 1) * bcs + k) * int64_t{sizeof(float)});
    kernels.dot(m, n, k, A, ars, B, bcs, C, ldc, shadow);
    return true;
  }
  if (k <= kSmall && bcs == 1) {
    // streaming stores need aligned rows, and pay off once C outgrows the caches
    const int64_t align = kernels.vector_floats;
    const bool stream = m * n >= (int64_t{1} << 16) && ldc % align == 0 &&
                        reinterpret_cast<uintptr_t>(C) % (align * sizeof(float)) == 0;
    if (!stream) {
      kernels.bcast(m, n, k, A, ars, acs, B, brs, C, ldc, ahead);
      return true;
    }
    kernels.bcast_stream(m, n, k, A, ars, acs, B, brs, C, ldc, ahead);
#if defined(__x86_64__)
    _mm_sfence();  // order the streaming stores before the pool's hand-over
#endif
    return true;
  }
  if (m <= kSmall && acs == 1 && bcs == 1) {
    kernels.stream(m, n, k, A, ars, B, brs, C, ldc, ahead);
    return true;
  }
  return false;
}

}  // namespace lazytrace::cpu
