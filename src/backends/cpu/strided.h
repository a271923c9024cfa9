#pragma once
// Walking a strided view in row-major order, one run along the last dim at a time.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "lazytrace/core/shape.h"

namespace lazytrace::cpu {

/**
 * Visits elements [start, start + n) of `shape` in row-major order. For each run of
 * consecutive elements along the last dim it calls f(offset, count, stride), where
 * offset is in elements from `base` and stride is the last dim's stride.
 */
/** Element offset (from `base`) of row-major position `linear` in a strided view. */
inline int64_t offset_of(int64_t linear, const Shape& shape, const int64_t* strides, int64_t base) {
  for (int d = shape.size() - 1; d >= 0; --d) {
    base += (linear % shape[d]) * strides[d];
    linear /= shape[d];
  }
  return base;
}

template <typename F>
void for_each_run(const Shape& shape, const int64_t* strides, int64_t base, int64_t start,
                  int64_t n, F&& f) {
  if (n <= 0) return;
  const int nd = shape.size();
  if (nd == 0) {
    if (n > 0) f(base, int64_t{1}, int64_t{0});
    return;
  }
  int64_t idx[16];
  std::vector<int64_t> big;
  int64_t* ix = idx;
  if (nd > 16) {
    big.resize(nd);
    ix = big.data();
  }
  int64_t rem = start, off = base;
  for (int d = nd - 1; d >= 0; --d) {
    ix[d] = rem % shape[d];
    rem /= shape[d];
    off += ix[d] * strides[d];
  }
  const int64_t last = shape[nd - 1], ls = strides[nd - 1];
  while (n > 0) {
    int64_t cnt = std::min<int64_t>(n, last - ix[nd - 1]);
    f(off, cnt, ls);
    n -= cnt;
    if (n <= 0) break;
    off += (cnt - 1) * ls;
    ix[nd - 1] += cnt - 1;
    // advance by one element with carry
    int d = nd - 1;
    for (; d >= 0; --d) {
      if (++ix[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= (shape[d] - 1) * strides[d];
      ix[d] = 0;
    }
  }
}

}  // namespace lazytrace::cpu
