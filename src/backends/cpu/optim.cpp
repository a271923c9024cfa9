// Optimizer update kernels: one pass over a parameter and its state.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backends/cpu/dtype_dispatch.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/optim_loops.h"
#include "runtime/thread_pool.h"

namespace lazytrace::cpu {
namespace {

double single_value(const compiler::View& v, const RunContext& ctx) {
  if (v.is_scalar()) return ctx.scalar(v).f;
  return dispatch(v.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    return static_cast<double>(reinterpret_cast<const S*>(ctx.base[v.storage])[v.offset]);
  });
}

template <typename S>
void adamw_typed(const compiler::AdamWStep& s, const RunContext& ctx) {
  using C = compute_t<S>;
  constexpr auto r = round_to<S>;
  auto at = [&](const compiler::View& v) {
    return reinterpret_cast<S*>(ctx.base[v.storage]) + v.offset;
  };
  auto number = [&](double x) { return r(static_cast<C>(x)); };
  const AdamWNumbers<S> k{number(single_value(s.decay, ctx)),
                          number(single_value(s.step_size, ctx)),
                          number(single_value(s.inv_sqrt_bc2, ctx)),
                          number(s.beta1),
                          number(1 - s.beta1),
                          number(s.beta2),
                          number(1 - s.beta2),
                          number(s.eps)};
  const S *p = at(s.param), *m = at(s.exp_avg), *v = at(s.exp_avg_sq);
  const S* g = s.grad_product ? nullptr : at(s.grad);  // else computed block by block
  S* po = reinterpret_cast<S*>(ctx.base[s.out[0]]);
  S* mo = reinterpret_cast<S*>(ctx.base[s.out[1]]);
  S* vo = reinterpret_cast<S*>(ctx.base[s.out[2]]);
  const bool in_place = po == p && mo == m && vo == v;
  const bool apart = po != p && mo != m && vo != v;
  // elements [lo, lo + n) with their gradient at gr
  auto update = [&](int64_t lo, const S* gr, int64_t n) {
    if constexpr (std::is_same_v<S, float>)
      if (has_avx2() && (in_place || apart)) {
        if (in_place) return adamw_in_place_f32_avx2(po + lo, gr, mo + lo, vo + lo, k, n);
        return adamw_range_f32_avx2(p + lo, gr, m + lo, v + lo, po + lo, mo + lo, vo + lo, k, n);
      }
    if (in_place)
      adamw_in_place<S>(po + lo, gr, mo + lo, vo + lo, k, n);
    else if (apart)
      adamw_range<S>(p + lo, gr, m + lo, v + lo, po + lo, mo + lo, vo + lo, k, n);
    else
      adamw_any<S>(p + lo, gr, m + lo, v + lo, po + lo, mo + lo, vo + lo, k, n);
  };
  if (!s.grad_product) {
    runtime::parallel_for(s.param.shape.numel(), 1 << 15,
                          [&](int64_t lo, int64_t hi) { update(lo, g + lo, hi - lo); });
    return;
  }
  if constexpr (std::is_same_v<S, float>) {
    // The gradient is a product (a weight's, over few tokens): each block of rows is
    // multiplied into a buffer that stays in L1, then updated from it.
    const compiler::MatmulStep& mp = *s.grad_product;
    const int nd = mp.out_shape.size();
    const int64_t rows = mp.out_shape[nd - 2], cols = mp.out_shape[nd - 1];
    if (rows * cols == 0) return;
    const int64_t nbatch = mp.out_shape.numel() / (rows * cols);
    const int64_t block = std::clamp<int64_t>(8192 / std::max<int64_t>(cols, 1), 1, rows);
    const int64_t per_batch = (rows + block - 1) / block;
    runtime::parallel_for(nbatch * per_batch, 4, [&](int64_t w0, int64_t w1) {
      thread_local std::vector<float> buf;
      buf.resize(static_cast<size_t>(block * cols));
      for (int64_t w = w0; w < w1; ++w) {
        const int64_t bi = w / per_batch, r0 = (w % per_batch) * block;
        const int64_t nr = std::min(block, rows - r0);
        matmul_rows_f32(mp, bi, r0, nr, buf.data(), ctx);
        update((bi * rows + r0) * cols, buf.data(), nr * cols);
      }
    });
  }
}

}  // namespace

void run_adamw(const compiler::AdamWStep& s, const RunContext& ctx) {
  switch (s.param.dtype) {
    case DType::float32:
      return adamw_typed<float>(s, ctx);
    case DType::float64:
      return adamw_typed<double>(s, ctx);
    case DType::float16:
      return adamw_typed<Half>(s, ctx);
    case DType::bfloat16:
      return adamw_typed<BFloat16>(s, ctx);
    default:
      fail("adamw", "needs a floating parameter, got ", dtype_name(s.param.dtype));
  }
}

}  // namespace lazytrace::cpu
