// Optimizer update kernels: one pass over a parameter and its state.
#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cpu/dtype_dispatch.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/optim_loops.h"
#include "runtime/thread_pool.h"

namespace lazytrace::cpu {
namespace {

double single_value(const View& v, const RunContext& ctx) {
  if (v.is_scalar()) return ctx.scalar(v).f;
  return dispatch(v.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    return static_cast<double>(reinterpret_cast<const S*>(ctx.base[v.storage])[v.offset]);
  });
}

// One update's operands and numbers, and the loop over a range of its elements.
template <typename S>
class Update {
 public:
  Update(const AdamWStep& s, const RunContext& ctx) {
    auto at = [&](const View& v) { return reinterpret_cast<S*>(ctx.base[v.storage]) + v.offset; };
    auto number = [&](double x) { return round_to<S>(static_cast<C>(x)); };
    k_ = {number(single_value(s.decay, ctx)),
          number(single_value(s.step_size, ctx)),
          number(single_value(s.inv_sqrt_bc2, ctx)),
          number(s.beta1),
          number(1 - s.beta1),
          number(s.beta2),
          number(1 - s.beta2),
          number(s.eps)};
    p_ = at(s.param);
    m_ = at(s.exp_avg);
    v_ = at(s.exp_avg_sq);
    g_ = s.grad_product ? nullptr : at(s.grad);  // else computed block by block
    if (s.grad_scale) scale_ = static_cast<float>(single_value(*s.grad_scale, ctx));
    po_ = reinterpret_cast<S*>(ctx.base[s.out[0]]);
    mo_ = reinterpret_cast<S*>(ctx.base[s.out[1]]);
    vo_ = reinterpret_cast<S*>(ctx.base[s.out[2]]);
    in_place_ = po_ == p_ && mo_ == m_ && vo_ == v_;
    apart_ = po_ != p_ && mo_ != m_ && vo_ != v_;
  }

  const S* grad() const { return g_; }

  // A product gradient's n values times its factor, if it has one (AdamWStep::grad_scale):
  // the bits of multiplying the product by it elementwise.
  void scale(float* g, int64_t n) const {
    if (scale_)
      for (int64_t i = 0; i < n; ++i) g[i] *= *scale_;
  }

  // Elements [lo, lo + n) of the parameter and moments, to prefetch while a product runs.
  ReadAhead ahead(int64_t lo, int64_t n) const {
    return {.stream = {p_ + lo, m_ + lo, v_ + lo},
            .bytes = n * static_cast<int64_t>(sizeof(S)),
            .write = in_place_ && has_prefetchw()};
  }

  // elements [lo, lo + n) with their gradient at gr
  void operator()(int64_t lo, const S* gr, int64_t n) const {
    if (in_place_ || apart_) return run(lo, gr, n, in_place_);
    // Some outputs are their inputs' buffers (donated), the others new ones: a chunk at a
    // time, the inputs of the new ones are copied there, then all three are updated in place.
    constexpr int64_t kChunk = 2048;
    for (int64_t c = 0; c < n; c += kChunk) {
      const int64_t k = std::min(kChunk, n - c);
      for (auto [in, out] : {std::pair{p_, po_}, {m_, mo_}, {v_, vo_}})
        if (in != out) std::copy_n(in + lo + c, k, out + lo + c);
      run(lo + c, gr + c, k, /*in_place=*/true);
    }
  }

 private:
  // the loop for outputs that are all the inputs' buffers (in_place) or all new ones
  void run(int64_t lo, const S* gr, int64_t n, bool in_place) const {
    if constexpr (std::is_same_v<S, float>) {
      if (has_avx512()) {
        if (in_place) return adamw_in_place_f32_avx512(po_ + lo, gr, mo_ + lo, vo_ + lo, k_, n);
        return adamw_range_f32_avx512(p_ + lo, gr, m_ + lo, v_ + lo, po_ + lo, mo_ + lo, vo_ + lo,
                                      k_, n);
      }
      if (has_avx2()) {
        if (in_place) return adamw_in_place_f32_avx2(po_ + lo, gr, mo_ + lo, vo_ + lo, k_, n);
        return adamw_range_f32_avx2(p_ + lo, gr, m_ + lo, v_ + lo, po_ + lo, mo_ + lo, vo_ + lo, k_,
                                    n);
      }
    }
    if (in_place)
      adamw_in_place<S>(po_ + lo, gr, mo_ + lo, vo_ + lo, k_, n);
    else
      adamw_range<S>(p_ + lo, gr, m_ + lo, v_ + lo, po_ + lo, mo_ + lo, vo_ + lo, k_, n);
  }

  using C = compute_t<S>;
  AdamWNumbers<S> k_;
  const S *p_, *m_, *v_, *g_;
  S *po_, *mo_, *vo_;
  bool in_place_, apart_;
  std::optional<float> scale_;
};

// The blocks of rows a product gradient is made in, about 16K elements: each stays in the
// caches until its rows are updated from it (perf-log.md has the sizes tried).
struct ProductBlocks {
  int64_t rows, cols, block, per_batch;
  explicit ProductBlocks(const MatmulStep& mp) {
    const int nd = mp.out_shape.size();
    rows = mp.out_shape[nd - 2];
    cols = mp.out_shape[nd - 1];
    block = std::clamp<int64_t>(16384 / std::max<int64_t>(cols, 1), 1, std::max<int64_t>(rows, 1));
    per_batch = (rows + block - 1) / block;
  }
};

// Block b of batch bi: its gradient rows multiplied into a buffer, then updated from it.
// While the product runs, the rows' parameter and moments are prefetched: the product alone
// leaves memory idle, the update alone waits on it.
void update_block(const Update<float>& update, const MatmulStep& mp, const ProductBlocks& pb,
                  int64_t bi, int64_t b, const RunContext& ctx) {
  thread_local std::vector<float> buf;
  const int64_t r0 = b * pb.block, nr = std::min(pb.block, pb.rows - r0);
  const int64_t lo = (bi * pb.rows + r0) * pb.cols, n = nr * pb.cols;
  buf.resize(static_cast<size_t>(pb.block * pb.cols));
  ReadAhead ahead = update.ahead(lo, n);
  matmul_rows_f32(mp, bi, r0, nr, buf.data(), ctx, &ahead);
  update.scale(buf.data(), n);
  update(lo, buf.data(), n);
}

}  // namespace

int64_t adamw_blocks_per_batch(const AdamWStep& s) {
  return ProductBlocks(*s.grad_product).per_batch;
}

void run_adamw_block(const AdamWStep& s, const RunContext& ctx, int64_t bi, int64_t b) {
  update_block(Update<float>(s, ctx), *s.grad_product, ProductBlocks(*s.grad_product), bi, b, ctx);
}

namespace {

template <typename S>
void adamw_typed(const AdamWStep& s, const RunContext& ctx) {
  const Update<S> update(s, ctx);
  if (!s.grad_product) {
    runtime::parallel_for(s.param.shape.numel(), 1 << 15,
                          [&](int64_t lo, int64_t hi) { update(lo, update.grad() + lo, hi - lo); });
    return;
  }
  if constexpr (std::is_same_v<S, float>) {
    // The gradient is a product (a weight's, over few tokens), made block by block.
    const ProductBlocks pb(*s.grad_product);
    if (pb.rows * pb.cols == 0) return;
    const int64_t nbatch = s.grad_product->out_shape.numel() / (pb.rows * pb.cols);
    runtime::parallel_for(nbatch * pb.per_batch, 4, [&](int64_t w0, int64_t w1) {
      for (int64_t w = w0; w < w1; ++w)
        update_block(update, *s.grad_product, pb, w / pb.per_batch, w % pb.per_batch, ctx);
    });
  }
}

}  // namespace

void run_adamw(const AdamWStep& s, const RunContext& ctx) {
  switch (s.param.dtype) {
    case DType::float32:
      return adamw_typed<float>(s, ctx);
    case DType::float64:
      return adamw_typed<double>(s, ctx);
    case DType::float16:
      return adamw_typed<Half>(s, ctx);
    case DType::bfloat16:
      return adamw_typed<BFloat16>(s, ctx);
    case DType::int32:
    case DType::int64:
    case DType::bool_:
      break;
  }
  fail("adamw", "needs a floating parameter, got ", dtype_name(s.param.dtype));
}

}  // namespace lazytrace::cpu
