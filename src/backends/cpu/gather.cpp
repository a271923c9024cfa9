// index_select gathers slices of a strided view along one dim by an integer index;
// index_add (its VJP) scatters slices back, adding where indices repeat; check_targets
// checks indices computed in the graph (cross_entropy's targets, Embedding's indices).
#include "backends/cpu/dtype_dispatch.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/strided.h"

namespace lazytrace::cpu {
namespace {

template <typename I>
std::vector<int64_t> read_index(const View& v, const RunContext& ctx, int64_t limit,
                                const char* op) {
  const I* p = reinterpret_cast<const I*>(ctx.base[v.storage]);
  std::vector<int64_t> idx(static_cast<size_t>(v.shape[0]));
  for (int64_t i = 0; i < v.shape[0]; ++i) {
    int64_t x = static_cast<int64_t>(p[v.offset + i * v.strides[0]]);
    if (x < -limit || x >= limit)
      fail(op, "index ", x, " at position ", i, " is out of range for a dim of size ", limit,
           "; indices must be in [", -limit, ", ", limit, ").");
    idx[i] = x < 0 ? x + limit : x;
  }
  return idx;
}

// out = in (contiguous), then out[outer, idx[j], inner] += source[outer, j, inner] for each j
// in order, so repeated indices accumulate.
void run_index_add(const GatherStep& s, const std::vector<int64_t>& idx, const RunContext& ctx) {
  const View& src = *s.source;
  dispatch(s.in.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    // 16-bit floats accumulate in float32 and are rounded once at the end
    constexpr bool kNarrow = std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>;
    using A = std::conditional_t<kNarrow, float, S>;
    const S* in = reinterpret_cast<const S*>(ctx.base[s.in.storage]);
    const S* sp = reinterpret_cast<const S*>(ctx.base[src.storage]);
    S* out = reinterpret_cast<S*>(ctx.base[s.out_storage]);
    std::vector<float> scratch(kNarrow ? static_cast<size_t>(s.in.shape.numel()) : 0);
    A* acc = nullptr;
    if constexpr (kNarrow)
      acc = scratch.data();
    else
      acc = out;
    int64_t w = 0;
    for_each_run(s.in.shape, s.in.strides.data(), s.in.offset, 0, s.in.shape.numel(),
                 [&](int64_t off, int64_t cnt, int64_t st) {
                   for (int64_t q = 0; q < cnt; ++q) acc[w++] = convert<A>(in[off + q * st]);
                 });
    Shape outer, inner;
    std::vector<int64_t> ostr, istr;
    for (int d = 0; d < src.shape.size(); ++d) {
      if (d < s.dim) {
        outer.push_back(src.shape[d]);
        ostr.push_back(src.strides[d]);
      } else if (d > s.dim) {
        inner.push_back(src.shape[d]);
        istr.push_back(src.strides[d]);
      }
    }
    const int64_t no = outer.numel(), ni = inner.numel(), nj = static_cast<int64_t>(idx.size());
    const int64_t rows = s.in.shape[s.dim];
    for (int64_t o = 0; o < no; ++o) {
      const int64_t sbase = offset_of(o, outer, ostr.data(), src.offset);
      for (int64_t j = 0; j < nj; ++j) {
        A* dst = acc + (o * rows + idx[j]) * ni;
        int64_t k = 0;
        for_each_run(inner, istr.data(), sbase + j * src.strides[s.dim], 0, ni,
                     [&](int64_t off, int64_t cnt, int64_t st) {
                       for (int64_t q = 0; q < cnt; ++q, ++k)
                         dst[k] = static_cast<A>(dst[k] + convert<A>(sp[off + q * st]));
                     });
      }
    }
    if constexpr (kNarrow)
      for (int64_t i = 0; i < s.in.shape.numel(); ++i) out[i] = convert<S>(acc[i]);
  });
}

}  // namespace

void run_gather(const GatherStep& s, const RunContext& ctx) {
  const int64_t limit = s.in.shape[s.dim];
  const char* op = s.source ? "index_add" : "index_select";
  std::vector<int64_t> idx = s.index.dtype == DType::int32
                                 ? read_index<int32_t>(s.index, ctx, limit, op)
                                 : read_index<int64_t>(s.index, ctx, limit, op);
  if (s.source) return run_index_add(s, idx, ctx);
  // Output element (outer, j, inner) reads input (outer, idx[j], inner): a view of the
  // input whose dim `s.dim` walks the index.
  dispatch(s.in.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* in = reinterpret_cast<const S*>(ctx.base[s.in.storage]);
    S* out = reinterpret_cast<S*>(ctx.base[s.out_storage]);
    Shape outer, inner;
    std::vector<int64_t> ostr, istr;
    for (int d = 0; d < s.in.shape.size(); ++d) {
      if (d < s.dim) {
        outer.push_back(s.in.shape[d]);
        ostr.push_back(s.in.strides[d]);
      } else if (d > s.dim) {
        inner.push_back(s.in.shape[d]);
        istr.push_back(s.in.strides[d]);
      }
    }
    const int64_t no = outer.numel(), ni = inner.numel(), nj = static_cast<int64_t>(idx.size());
    const int64_t dstride = s.in.strides[s.dim];
    int64_t w = 0;
    for (int64_t o = 0; o < no; ++o) {
      const int64_t base = offset_of(o, outer, ostr.data(), s.in.offset);
      for (int64_t j = 0; j < nj; ++j) {
        for_each_run(inner, istr.data(), base + idx[j] * dstride, 0, ni,
                     [&](int64_t off, int64_t cnt, int64_t st) {
                       for (int64_t q = 0; q < cnt; ++q) out[w++] = in[off + q * st];
                     });
      }
    }
  });
}

void run_check(const CheckStep& s, const RunContext& ctx) {
  dispatch(s.targets.dtype, [&](auto tag) {
    using I = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<I>) {
      const I* p = reinterpret_cast<const I*>(ctx.base[s.targets.storage]);
      int64_t i = 0;
      for_each_run(s.targets.shape, s.targets.strides.data(), s.targets.offset, 0,
                   s.targets.shape.numel(), [&](int64_t off, int64_t cnt, int64_t st) {
                     for (int64_t q = 0; q < cnt; ++q, ++i) {
                       const auto t = static_cast<int64_t>(p[off + q * st]);
                       if (t == s.ignore_index || (t >= 0 && t < s.classes)) continue;
                       const auto who = static_cast<ir::IndexCheck>(s.who);
                       const char* op = ir::index_check_op(who);
                       if (who == ir::IndexCheck::EmbeddingIndices)
                         fail(op, "index ", t, " at position ", i, " is out of range for ",
                              s.classes, " embeddings; indices must be in [0, ", s.classes, ").");
                       fail(op, "target ", t, " at position ", i, " is out of range for ",
                            s.classes, " classes; targets must be in [0, ", s.classes,
                            ") or ignore_index (", s.ignore_index, ").");
                     }
                   });
    }
  });
}

}  // namespace lazytrace::cpu
