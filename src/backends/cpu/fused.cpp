// The fused elementwise kernel: runs a step's instruction list over tiles of the
// iteration space, with loads and stores through strided views.
#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <type_traits>

#include "backends/cpu/dtype_dispatch.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/jit_elementwise.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/math.h"
#include "backends/cpu/random.h"
#include "backends/cpu/strided.h"
#include "backends/cpu/timed_choice.h"
#include "runtime/thread_pool.h"

namespace lazytrace::cpu {
namespace {

using ir::OpKind;

constexpr int64_t kTile = 1024;

template <typename S>
using compute_t =
    std::conditional_t<std::is_same_v<S, double>, double,
                       std::conditional_t<std::is_floating_point_v<S> || std::is_same_v<S, Half> ||
                                              std::is_same_v<S, BFloat16>,
                                          float, int64_t>>;

// A tile's registers: each has kTile values of scratch, and `at` says where its values are
// read from: its scratch, or (a load of a contiguous view in the compute dtype) the view's
// own memory, read in place instead of copied.
struct Regs {
  uint64_t* scratch;
  const void** at;
  int* in_load;  // the load a register reads in place, else -1

  template <typename C>
  const C* in(int r) const {
    return static_cast<const C*>(at[r]);
  }
  // Register r's scratch, where an instruction writes its result (after reading operands).
  template <typename C>
  C* out(int r) const {
    C* p = own<C>(r);
    at[r] = p;
    in_load[r] = -1;
    return p;
  }
  template <typename C>
  C* own(int r) const {
    return reinterpret_cast<C*>(scratch + static_cast<int64_t>(r) * kTile);
  }
};

template <typename S>
void load(const View& v, const RunContext& ctx, int64_t start, int64_t n, compute_t<S>* out) {
  using C = compute_t<S>;
  if (v.is_scalar()) {
    runtime::ScalarArg a = ctx.scalar(v);
    C x = std::is_integral_v<C> ? static_cast<C>(a.i) : static_cast<C>(a.f);
    for (int64_t j = 0; j < n; ++j) out[j] = x;
    return;
  }
  const S* p = reinterpret_cast<const S*>(ctx.base[v.storage]);
  int64_t w = 0;
  for_each_run(v.shape, v.strides.data(), v.offset, start, n,
               [&](int64_t off, int64_t cnt, int64_t st) {
                 const S* q = p + off;
                 if constexpr (std::is_same_v<S, bool>)
                   if (st == 1) {  // as bytes, which the compiler widens a vector at a time
                     const auto* b = reinterpret_cast<const uint8_t*>(q);
                     C* o = out + w;
                     for (int64_t k = 0; k < cnt; ++k) o[k] = b[k];
                     w += cnt;
                     return;
                   }
                 if (st == 1)
                   for (int64_t k = 0; k < cnt; ++k) out[w + k] = convert<C>(q[k]);
                 else if (st == 0) {
                   C x = convert<C>(q[0]);
                   for (int64_t k = 0; k < cnt; ++k) out[w + k] = x;
                 } else
                   for (int64_t k = 0; k < cnt; ++k) out[w + k] = convert<C>(q[k * st]);
                 w += cnt;
               });
}

// Copies a tile to memory with non-temporal stores, which write whole lines without
// reading them first and without keeping them in the caches; false (nothing written) where
// the destination or the size is not in whole 16-byte units.
bool stream_copy(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
  if ((reinterpret_cast<uintptr_t>(dst) | bytes) % 16 != 0) return false;
  auto* d = static_cast<__m128i*>(dst);
  const auto* s = static_cast<const __m128i*>(src);
  for (size_t i = 0; i < bytes / 16; ++i) _mm_stream_si128(d + i, _mm_loadu_si128(s + i));
  return true;
#else
  (void)dst, (void)src, (void)bytes;
  return false;
#endif
}

// A contiguous view is one run from its offset: no walk over its dims (a division per dim).
template <typename S>
void store(const View& v, bool contiguous, bool stream, const RunContext& ctx, int64_t start,
           int64_t n, const compute_t<S>* in) {
  S* p = reinterpret_cast<S*>(ctx.base[v.storage]);
  if (contiguous) {
    S* q = p + v.offset + start;
    if constexpr (std::is_same_v<S, compute_t<S>>) {
      const size_t bytes = static_cast<size_t>(n) * sizeof(S);
      if (!stream || !stream_copy(q, in, bytes)) std::memcpy(q, in, bytes);
    } else
      for (int64_t k = 0; k < n; ++k) q[k] = convert<S>(in[k]);
    return;
  }
  int64_t r = 0;
  for_each_run(v.shape, v.strides.data(), v.offset, start, n,
               [&](int64_t off, int64_t cnt, int64_t st) {
                 S* q = p + off;
                 if (st == 1)
                   for (int64_t k = 0; k < cnt; ++k) q[k] = convert<S>(in[r + k]);
                 else
                   for (int64_t k = 0; k < cnt; ++k) q[k * st] = convert<S>(in[r + k]);
                 r += cnt;
               });
}

// Rounds register values to what the node's dtype can hold (f16, bf16, i32, bool).
void round_to(DType dt, const Regs& regs, int r, int64_t n) {
  switch (dt) {
    case DType::float16: {
      float* x = regs.own<float>(r);
      for (int64_t j = 0; j < n; ++j) x[j] = static_cast<float>(Half(x[j]));
      break;
    }
    case DType::bfloat16: {
      float* x = regs.own<float>(r);
      for (int64_t j = 0; j < n; ++j) x[j] = static_cast<float>(BFloat16(x[j]));
      break;
    }
    case DType::int32: {
      int64_t* x = regs.own<int64_t>(r);
      for (int64_t j = 0; j < n; ++j) x[j] = static_cast<int32_t>(x[j]);
      break;
    }
    case DType::bool_: {
      int64_t* x = regs.own<int64_t>(r);
      for (int64_t j = 0; j < n; ++j) x[j] = x[j] != 0;
      break;
    }
    case DType::float32:  // registers hold these exactly
    case DType::float64:
    case DType::int64:
      break;
  }
}

// The loops of elementwise.h, in their AVX-512 or AVX2 copies for float32 where the CPU
// has them.
template <typename C>
void unary_op(OpKind op, C* d, const C* a, int64_t n) {
  if constexpr (std::is_same_v<C, float>) {
    if (has_avx512()) return unary_f32_avx512(op, d, a, n);
    if (has_avx2_fma()) return unary_f32_avx2(op, d, a, n);
  }
  elementwise::unary<C>(op, d, a, n);
}

template <typename C>
void binary_op(OpKind op, C* d, const C* a, bool a_one, const C* b, bool b_one, int64_t n) {
  if constexpr (std::is_same_v<C, float>) {
    if (has_avx512())
      return a_one || b_one ? binary_scalar_f32_avx512(op, d, a, a_one, b, b_one, n)
                            : binary_f32_avx512(op, d, a, b, n);
    if (has_avx2_fma())
      return a_one || b_one ? binary_scalar_f32_avx2(op, d, a, a_one, b, b_one, n)
                            : binary_f32_avx2(op, d, a, b, n);
  }
  if (a_one || b_one)
    elementwise::binary_scalar<C>(op, d, a, a_one, b, b_one, n);
  else
    elementwise::binary<C>(op, d, a, b, n);
}

template <typename T>
void compare(OpKind op, int64_t* d, const T* a, const T* b, int64_t n) {
  switch (op) {
#define LT_OP(kind, name, family, arity)
#define LT_COMPARE_OP(K, name)                                                   \
  case OpKind::K:                                                                \
    for (int64_t j = 0; j < n; ++j) d[j] = math::compare(OpKind::K, a[j], b[j]); \
    return;
#include "ir/ops.def"
#define LT_OP(kind, name, family, arity) case OpKind::kind:
#define LT_COMPARE_OP(kind, name)
#include "ir/ops.def"
    break;
  }
  LT_UNREACHABLE("compare runs a comparison");
}

// one[r]: 0 if register r holds n values, else the byte width (4: float, 8: double or
// int64) of the single value it holds in element 0.
char width_of(Compute c) {
  return c == Compute::F32 ? 4 : 8;
}

// Fills register r from its element 0 (a single-value register that an op needs whole).
// (A single-value register is always in its scratch.)
void expand(const Regs& regs, int r, int64_t n, char* one) {
  if (!one[r]) return;
  if (one[r] == 4) {
    float* x = regs.own<float>(r);
    for (int64_t j = 1; j < n; ++j) x[j] = x[0];
  } else {
    uint64_t* x = regs.own<uint64_t>(r);
    for (int64_t j = 1; j < n; ++j) x[j] = x[0];
  }
  one[r] = 0;
}

// Whether a load of this view can be read in place: every value contiguous, in its compute
// dtype.
bool reads_in_place(const View& v) {
  return !v.is_scalar() && v.is_contiguous() &&
         (v.dtype == DType::float32 || v.dtype == DType::float64 || v.dtype == DType::int64);
}

void exec(const FusedStep& st, const Instr& ins, const Regs& regs, int64_t start, int64_t n,
          const RunContext& ctx, char* one, const char* in_place) {
  const Compute out_c = compute_of(ins.dtype), in_c = compute_of(ins.in_dtype);
  const bool arith = !ir::is_compare(ins.op) && ins.src[1] >= 0 && ins.src[2] < 0 &&
                     ins.op != OpKind::RandUniform && ins.op != OpKind::RandNormal;
  // where's values are read as single values where they are one (a fill such as -inf)
  const bool where = ins.op == OpKind::Where;
  if (!arith)
    for (int i = 0; i < 3; ++i)
      if (ins.src[i] >= 0 && !(where && i > 0)) expand(regs, ins.src[i], n, one);
  // read before dst's flag is reset: dst may reuse an operand's register
  const bool a1 = (arith || where) && one[ins.src[where ? 1 : 0]],
             b1 = (arith || where) && one[ins.src[where ? 2 : 1]];
  one[ins.dst] = 0;
  switch (ins.op) {
    case OpKind::Data: {
      const View& v = st.loads[ins.load];
      if (in_place[ins.load]) {
        regs.at[ins.dst] = ctx.base[v.storage] + (v.offset + start) * itemsize(v.dtype);
        regs.in_load[ins.dst] = ins.load;
        return;
      }
      const bool single = v.is_single_value();
      dispatch(v.dtype, [&](auto tag) {
        using S = typename decltype(tag)::type;
        load<S>(v, ctx, start, single ? 1 : n, regs.out<compute_t<S>>(ins.dst));
      });
      one[ins.dst] = single ? width_of(compute_of(v.dtype)) : 0;
      if (!v.is_scalar()) return;  // stored values already fit their dtype; constants may not
      break;
    }
    case OpKind::Iota:
      dispatch_compute(out_c, [&](auto tag) {
        using C = typename decltype(tag)::type;
        C* d = regs.out<C>(ins.dst);
        for (int64_t j = 0; j < n; ++j)
          d[j] = static_cast<C>(ins.f[0] + static_cast<double>(start + j) * ins.f[1]);
      });
      break;
    case OpKind::RandUniform:
    case OpKind::RandNormal: {
      const uint64_t seed = static_cast<uint64_t>(regs.in<int64_t>(ins.src[0])[0]);
      const uint64_t offset = static_cast<uint64_t>(regs.in<int64_t>(ins.src[1])[0]);
      const bool normal = ins.op == OpKind::RandNormal;
      const int bits = ins.dtype == DType::float64    ? 53
                       : ins.dtype == DType::float16  ? 11
                       : ins.dtype == DType::bfloat16 ? 8
                                                      : 24;
      dispatch_compute(out_c, [&](auto tag) {
        using C = typename decltype(tag)::type;
        if constexpr (!std::is_integral_v<C>) {
          C* d = regs.out<C>(ins.dst);
          for (int64_t j = 0; j < n; ++j) {
            uint64_t c = offset + static_cast<uint64_t>(start + j);
            d[j] = normal ? cpu::normal<C>(seed, c) : cpu::uniform<C>(seed, c, bits);
          }
        }
      });
      break;
    }
    case OpKind::Cast:
      dispatch_compute(in_c, [&](auto in_tag) {
        using A = typename decltype(in_tag)::type;
        const A* a = regs.in<A>(ins.src[0]);
        if (ins.dtype == DType::bool_) {
          int64_t* d = regs.out<int64_t>(ins.dst);
          for (int64_t j = 0; j < n; ++j) d[j] = a[j] != A(0);
          return;
        }
        dispatch_compute(out_c, [&](auto out_tag) {
          using C = typename decltype(out_tag)::type;
          C* d = regs.out<C>(ins.dst);
          for (int64_t j = 0; j < n; ++j) d[j] = static_cast<C>(a[j]);
        });
      });
      break;
    case OpKind::Where:
      dispatch_compute(out_c, [&](auto tag) {
        using C = typename decltype(tag)::type;
        const int64_t* c = regs.in<int64_t>(ins.src[0]);
        const C* a = regs.in<C>(ins.src[1]);
        const C* b = regs.in<C>(ins.src[2]);
        const C a0 = a[0], b0 = b[0];  // before d, which may be a's or b's register, is written
        C* d = regs.out<C>(ins.dst);
        if (a1 && b1)
          for (int64_t j = 0; j < n; ++j) d[j] = c[j] ? a0 : b0;
        else if (a1)
          for (int64_t j = 0; j < n; ++j) d[j] = c[j] ? a0 : b[j];
        else if (b1)
          for (int64_t j = 0; j < n; ++j) d[j] = c[j] ? a[j] : b0;
        else
          for (int64_t j = 0; j < n; ++j) d[j] = c[j] ? a[j] : b[j];
      });
      break;
#define LT_OP(kind, name, family, arity)
#define LT_COMPARE_OP(kind, name) case OpKind::kind:
#include "ir/ops.def"
      dispatch_compute(in_c, [&](auto tag) {
        using C = typename decltype(tag)::type;
        const C* a = regs.in<C>(ins.src[0]);
        const C* b = regs.in<C>(ins.src[1]);
        compare<C>(ins.op, regs.out<int64_t>(ins.dst), a, b, n);
      });
      break;
#define LT_OP(kind, name, family, arity)
#define LT_BINARY_OP(kind, name) case OpKind::kind:
#include "ir/ops.def"
      dispatch_compute(out_c, [&](auto tag) {
        using C = typename decltype(tag)::type;
        const C* a = regs.in<C>(ins.src[0]);
        const C* b = regs.in<C>(ins.src[1]);
        binary_op<C>(ins.op, regs.out<C>(ins.dst), a, a1, b, b1, n);
      });
      one[ins.dst] = a1 && b1 ? width_of(out_c) : 0;
      break;
#define LT_OP(kind, name, family, arity)
#define LT_UNARY_OP(kind, name) case OpKind::kind:
#include "ir/ops.def"
      dispatch_compute(out_c, [&](auto tag) {
        using C = typename decltype(tag)::type;
        const C* a = regs.in<C>(ins.src[0]);
        unary_op<C>(ins.op, regs.out<C>(ins.dst), a, n);
      });
      break;
    // the rest are not elementwise: lowering never puts them in a fused step
    case OpKind::Scalar:
    case OpKind::Param:
    case OpKind::Reshape:
    case OpKind::Permute:
    case OpKind::BroadcastTo:
    case OpKind::Slice:
    case OpKind::Sum:
    case OpKind::Mean:
    case OpKind::Amax:
    case OpKind::Matmul:
    case OpKind::Concat:
    case OpKind::IndexSelect:
    case OpKind::IndexAdd:
    case OpKind::CheckTargets:
    case OpKind::Call:
    case OpKind::CallResult:
    case OpKind::Pack:
    case OpKind::Loop:
    case OpKind::AdamW:
    case OpKind::AdamWProduct:
    case OpKind::AllReduce:
    case OpKind::ReduceScatter:
    case OpKind::AllGather:
    case OpKind::Broadcast:
      LT_UNREACHABLE("a fused step holds elementwise ops and loads");
  }
  round_to(ins.dtype, regs, ins.dst, one[ins.dst] ? 1 : n);
}

// Asks the caches for the next tile of every load read in place, so that its memory
// arrives while this tile computes: a hardware prefetcher follows a stream only a few lines
// ahead, and a tile's instructions read their inputs in a burst, then compute for longer.
void read_ahead(const FusedStep& st, const RunContext& ctx, const char* in_place, int64_t next,
                int64_t total) {
  const int64_t n = std::min(kTile, total - next);
  for (size_t i = 0; i < st.loads.size(); ++i) {
    if (!in_place[i]) continue;
    const View& v = st.loads[i];
    const int64_t size = itemsize(v.dtype);
    const char* p = ctx.base[v.storage] + (v.offset + next) * size;
    for (int64_t b = 0; b < n * size; b += 64) __builtin_prefetch(p + b);
  }
}

}  // namespace

void run_fused(const FusedStep& st, const RunContext& ctx) {
  const int64_t total = st.shape.numel();
  if (total == 0 || st.stores.empty()) return;
  // whether the stores stream: the plan's, or the way the step's trial gives this run
  TimedRun timed(st.stream_trial, st.stream_stores);
  const bool stream = timed.way();
  if (st.jit && run_jit(st, ctx, stream)) {
    timed.done();
    return;
  }
  const int64_t tiles = (total + kTile - 1) / kTile;
  // loads read in place and contiguous stores, decided once per run
  thread_local std::vector<char> in_place_buf, contiguous_buf;
  in_place_buf.resize(st.loads.size());
  for (size_t i = 0; i < st.loads.size(); ++i) in_place_buf[i] = reads_in_place(st.loads[i]);
  contiguous_buf.resize(st.stores.size());
  for (size_t i = 0; i < st.stores.size(); ++i)
    contiguous_buf[i] = st.stores[i].dst.is_contiguous();
  const char* in_place = in_place_buf.data();
  const char* contiguous = contiguous_buf.data();
  // Steps of 8 tiles (8K elements) and more are shared out: a transformer's [tokens,
  // intermediate] steps at small batch are that size, and run serially they leave the other
  // cores idle.
  runtime::parallel_for(tiles, 4, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<uint64_t> scratch;
    thread_local std::vector<const void*> at;
    thread_local std::vector<int> in_load;
    thread_local std::vector<char> single;  // registers holding one value (see expand)
    const size_t nregs = static_cast<size_t>(std::max(st.num_regs, 1));
    if (scratch.size() < nregs * kTile) scratch.resize(nregs * kTile);
    if (at.size() < nregs) {
      at.resize(nregs);
      in_load.resize(nregs);
      single.resize(nregs);
    }
    const Regs regs{scratch.data(), at.data(), in_load.data()};
    for (size_t r = 0; r < nregs; ++r) regs.out<uint64_t>(static_cast<int>(r));
    char* one = single.data();
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t start = t * kTile, n = std::min(kTile, total - start);
      if (st.read_ahead && t + 1 < t1) read_ahead(st, ctx, in_place, start + n, total);
      for (const Instr& ins : st.program) exec(st, ins, regs, start, n, ctx, one, in_place);
      for (const auto& s : st.stores) {
        expand(regs, s.reg, n, one);
        // a register read in place from a storage that a store writes (an output given an
        // input's buffer) is copied first: the store before it may overwrite it
        if (regs.in_load[s.reg] < 0) continue;
        const View& v = st.loads[static_cast<size_t>(regs.in_load[s.reg])];
        for (const auto& w : st.stores)
          if (w.dst.storage == v.storage) {
            const void* src = regs.at[s.reg];
            std::memcpy(regs.out<char>(s.reg), src, static_cast<size_t>(n) * itemsize(v.dtype));
            break;
          }
      }
      for (size_t i = 0; i < st.stores.size(); ++i) {
        const auto& s = st.stores[i];
        dispatch(s.dst.dtype, [&](auto tag) {
          using S = typename decltype(tag)::type;
          store<S>(s.dst, contiguous[i], stream, ctx, start, n, regs.in<compute_t<S>>(s.reg));
        });
      }
    }
#if defined(__SSE2__)
    if (stream) _mm_sfence();  // the streamed lines reach memory before the join
#endif
  });
  timed.done();
}

}  // namespace lazytrace::cpu
