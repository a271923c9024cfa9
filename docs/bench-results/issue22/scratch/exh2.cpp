#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
namespace oldm {
#include "math_old_body.h"
}
#undef LT_MATH_INLINE
#include "backends/cpu/math.h"
int main() {
  namespace m = lazytrace::cpu::math;
  long diff = 0, nan_diff = 0;
  for (uint64_t b = 0; b < (1ull << 32); ++b) {
    uint32_t u = (uint32_t)b;
    float x;
    std::memcpy(&x, &u, 4);
    float o[4] = {oldm::exp_f32(x), oldm::tanh_f32(x), 1.0f / (1.0f + oldm::exp_f32(-x)),
                  x * (1.0f / (1.0f + oldm::exp_f32(-x)))};
    float n[4] = {m::exp_f32(x), m::tanh_f32(x), m::sigmoid(x),
                  m::unary(lazytrace::ir::OpKind::Silu, x)};
    for (int k = 0; k < 4; ++k)
      if (std::memcmp(&o[k], &n[k], 4) != 0) {
        if (std::isnan(x) && std::isnan(o[k]) && std::isnan(n[k]))
          ++nan_diff;
        else {
          if (diff < 5) printf("fn %d differs at %a: %a vs %a\n", k, x, o[k], n[k]);
          ++diff;
        }
      }
  }
  printf("exp, tanh, sigmoid, silu: %ld non-NaN results differ; %ld NaN payloads differ\n", diff,
         nan_diff);
}
