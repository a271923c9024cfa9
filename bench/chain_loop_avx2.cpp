#include <immintrin.h>

#include "chain_loop.h"

namespace bench {

void chain_loop_avx2(const float* x, float* y, int64_t begin, int64_t end, bool cheap) {
  chain_loop(x, y, begin, end, cheap);
}

void stream_copy_avx2(const float* x, float* y, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) _mm256_stream_ps(y + i, _mm256_load_ps(x + i));
  for (; i < end; ++i) y[i] = x[i];
  _mm_sfence();
}

}  // namespace bench
