// Reductions (sum, mean, amax) over any set of dims of a strided view.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/dtype_dispatch.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/reduce_row.h"
#include "backends/cpu/strided.h"
#include "runtime/thread_pool.h"

namespace lazytrace::cpu {
namespace {

using ir::OpKind;

template <typename S>
using acc_t = std::conditional_t<std::is_integral_v<S>, int64_t, double>;

template <typename A>
A init_value(OpKind op) {
  if (op != OpKind::Amax) return A(0);
  if constexpr (std::is_floating_point_v<A>) return -std::numeric_limits<A>::infinity();
  return std::numeric_limits<A>::lowest();
}

template <typename A>
inline A combine(OpKind op, A acc, A x) {
  if (op != OpKind::Amax) return acc + x;
  if constexpr (std::is_floating_point_v<A>)
    if (std::isnan(x)) return x;
  return x > acc ? x : acc;
}

// One contiguous run of n elements, in interleaved partial results combined at the end (a
// sum's additions are independent of each other, so they overlap; the order is fixed,
// whatever the threads): float32 in 16, in vector lanes (reduce_row.h), other dtypes in 4.
template <typename S, typename A>
A reduce_row(OpKind op, const S* x, int64_t n) {
  if constexpr (std::is_same_v<S, float> && std::is_same_v<A, double>)
    return op == OpKind::Amax ? max_row_f32(x, n) : sum_row_f32(x, n);  // reduce_row.h
  if constexpr ((std::is_same_v<S, Half> ||
                 std::is_same_v<S, BFloat16>)&&std::is_same_v<A, double>) {
    // widened a block at a time, each block by float32's loops, the blocks combined in order
    constexpr int64_t kBlock = 256;
    float block[kBlock];
    A acc = init_value<A>(op);
    for (int64_t j = 0; j < n; j += kBlock) {
      const int64_t m = std::min(kBlock, n - j);
      for (int64_t q = 0; q < m; ++q) block[q] = static_cast<float>(x[j + q]);
      acc = combine(op, acc, reduce_row<float, A>(op, block, m));
    }
    return acc;
  }
  A acc[4] = {init_value<A>(op), init_value<A>(op), init_value<A>(op), init_value<A>(op)};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    for (int q = 0; q < 4; ++q) acc[q] = combine(op, acc[q], convert<A>(x[j + q]));
  for (; j < n; ++j) acc[0] = combine(op, acc[0], convert<A>(x[j]));
  return combine(op, combine(op, acc[0], acc[1]), combine(op, acc[2], acc[3]));
}

// A row of 2 * kChunk values or more is reduced in chunks of kChunk, combined in order, on
// one thread or several (a few long rows are shared out chunk by chunk): the same bits
// whatever the threads.
constexpr int64_t kChunk = int64_t{1} << 15;

// Chunk c of a row of n values, reduced.
template <typename S, typename A>
A reduce_chunk(OpKind op, const S* x, int64_t n, int64_t c) {
  return reduce_row<S, A>(op, x + c * kChunk, std::min(kChunk, n - c * kChunk));
}

// The chunks' results, combined in order.
template <typename A, typename F>
A combine_chunks(OpKind op, int64_t chunks, const F& chunk) {
  A acc = init_value<A>(op);
  for (int64_t c = 0; c < chunks; ++c) acc = combine(op, acc, chunk(c));
  return acc;
}

template <typename S, typename A>
A reduce_run(OpKind op, const S* x, int64_t n) {
  if (n < 2 * kChunk) return reduce_row<S, A>(op, x, n);
  return combine_chunks<A>(op, (n + kChunk - 1) / kChunk,
                           [&](int64_t c) { return reduce_chunk<S, A>(op, x, n, c); });
}

// Merges the reduced dims that are one run of memory together, dropping size-1 dims.
void merge_runs(Shape& shape, std::vector<int64_t>& strides) {
  std::vector<int64_t> dims, mstr;
  for (int d = 0; d < shape.size(); ++d) {
    const int64_t st = strides[static_cast<size_t>(d)];
    if (shape[d] == 1) continue;
    if (!mstr.empty() && mstr.back() == st * shape[d]) {
      dims.back() *= shape[d];
      mstr.back() = st;
    } else {
      dims.push_back(shape[d]);
      mstr.push_back(st);
    }
  }
  if (dims.empty() && shape.size() > 0) {  // every dim of size 1: one element
    dims.push_back(1);
    mstr.push_back(1);
  }
  shape = Shape(dims);
  strides = std::move(mstr);
}

template <typename S, typename O>
void reduce_typed(const ReduceStep& s, const RunContext& ctx) {
  using A = acc_t<S>;
  const View& in = s.in;
  const S* p = reinterpret_cast<const S*>(ctx.base[in.storage]);
  O* out = reinterpret_cast<O*>(ctx.base[s.out_storage]);
  Shape kshape, rshape;
  std::vector<int64_t> kstr, rstr;
  size_t k = 0;
  bool inner_reduced = false;
  for (int d = 0; d < in.shape.size(); ++d) {
    if (k < s.dims.size() && s.dims[k] == d) {
      ++k;
      rshape.push_back(in.shape[d]);
      rstr.push_back(in.strides[d]);
      if (in.strides[d] == 1 && in.shape[d] > 1) inner_reduced = true;
    } else {
      kshape.push_back(in.shape[d]);
      kstr.push_back(in.strides[d]);
    }
  }
  merge_runs(rshape, rstr);  // a whole tensor summed is one row
  const int64_t nout = kshape.numel(), nred = rshape.numel();
  const OpKind op = s.op;
  auto finish = [&](A acc) -> O {
    if (op == OpKind::Mean) return convert<O>(static_cast<double>(acc) / static_cast<double>(nred));
    return convert<O>(acc);
  };
  if (nout == 0) return;
  if (inner_reduced || kshape.size() == 0) {
    // each output walks its own reduced elements; the outputs in order, their first elements
    // by for_each_run (a division per dim once per part, not once per output)
    const bool row = rshape.size() == 1 && rstr[0] == 1;  // one contiguous run each
    const Shape ks = kshape.size() ? kshape : Shape{1};   // (all reduced: one output)
    const int64_t* kst = kshape.size() ? kstr.data() : &nred;
    if (row && nout < runtime::num_threads() && nred >= 2 * kChunk) {
      // fewer outputs than threads, long rows: each row's chunks (reduce_run's) shared out,
      // their results combined in reduce_run's order
      const int64_t chunks = (nred + kChunk - 1) / kChunk;
      thread_local std::vector<A> parts;
      parts.resize(static_cast<size_t>(nout * chunks));
      A* part = parts.data();
      runtime::parallel_for(nout * chunks, 1, [&](int64_t w0, int64_t w1) {
        for (int64_t w = w0; w < w1; ++w) {
          const int64_t o = w / chunks;
          part[w] = reduce_chunk<S, A>(op, p + offset_of(o, ks, kst, in.offset), nred, w % chunks);
        }
      });
      for (int64_t o = 0; o < nout; ++o)
        out[o] =
            finish(combine_chunks<A>(op, chunks, [&](int64_t c) { return part[o * chunks + c]; }));
      return;
    }
    runtime::parallel_for(
        nout, std::max<int64_t>(1, 16384 / std::max<int64_t>(nred, 1)),
        [&](int64_t o0, int64_t o1) {
          int64_t o = o0;
          for_each_run(ks, kst, in.offset, o0, o1 - o0, [&](int64_t off, int64_t cnt, int64_t st) {
            for (int64_t k = 0; k < cnt; ++k, ++o) {
              const int64_t base = off + k * st;
              if (row) {
                out[o] = finish(reduce_run<S, A>(op, p + base, nred));
                continue;
              }
              A acc = init_value<A>(op);
              for_each_run(rshape, rstr.data(), base, 0, nred,
                           [&](int64_t roff, int64_t rcnt, int64_t rst) {
                             for (int64_t j = 0; j < rcnt; ++j)
                               acc = combine(op, acc, convert<A>(p[roff + j * rst]));
                           });
              out[o] = finish(acc);
            }
          });
        });
    return;
  }
  // reduced dims are outer: sweep them, accumulating a row of outputs at a time
  runtime::parallel_for(nout, 4096, [&](int64_t o0, int64_t o1) {
    thread_local std::vector<A> accs;
    accs.assign(static_cast<size_t>(o1 - o0), init_value<A>(op));
    for (int64_t r = 0; r < nred; ++r) {
      const int64_t base = offset_of(r, rshape, rstr.data(), in.offset);
      int64_t w = 0;
      for_each_run(kshape, kstr.data(), base, o0, o1 - o0,
                   [&](int64_t off, int64_t cnt, int64_t st) {
                     for (int64_t j = 0; j < cnt; ++j)
                       accs[w + j] = combine(op, accs[w + j], convert<A>(p[off + j * st]));
                     w += cnt;
                   });
    }
    for (int64_t o = o0; o < o1; ++o) out[o] = finish(accs[o - o0]);
  });
}

}  // namespace

void run_reduce(const ReduceStep& s, const RunContext& ctx) {
  dispatch(s.in.dtype, [&](auto in_tag) {
    using S = typename decltype(in_tag)::type;
    dispatch(s.out_dtype, [&](auto out_tag) {
      using O = typename decltype(out_tag)::type;
      reduce_typed<S, O>(s, ctx);
    });
  });
}

}  // namespace lazytrace::cpu
