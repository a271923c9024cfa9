// Fused elementwise steps as native AVX-512 code (jit_elementwise.h). Each op is emitted as
// the instructions the interpreter's AVX-512 loops run for math.h's formula: the same
// operations in the same order, each FMA where math.h calls fma, so both give the same bits
// (jit_test checks them against the interpreter over every special value and a sweep of
// floats). The kernel loops over 16 floats at a time from `begin` to `end`, a masked pass
// for the last few.
#include "backends/cpu/jit_elementwise.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/math.h"
#include "metrics/known.h"
#include "runtime/thread_pool.h"

#if LAZYTRACE_HAVE_XBYAK
#include <xbyak/xbyak.h>
#endif

namespace lazytrace::cpu {

#if LAZYTRACE_HAVE_XBYAK

namespace {

using ir::OpKind;
using Fn = void (*)(const float* const* in, float* const* out, const float* consts, int64_t begin,
                    int64_t end);

constexpr int kTileFloats = 1024;  // a task of parallel_for: as fused.cpp's tiles
constexpr int kValueRegs = 24;     // zmm0..23 hold values, zmm24..31 are the ops' scratch
constexpr int kMaxPointers = 9;    // loads read as vectors and stores, one register each

bool takes(OpKind op) {
  for (OpKind k :
       {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Neg, OpKind::Abs, OpKind::Relu,
        OpKind::Exp, OpKind::Tanh, OpKind::Sigmoid, OpKind::Silu, OpKind::Sqrt, OpKind::Rsqrt})
    if (op == k) return true;
  return false;
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// vcmpps predicates
constexpr uint8_t kLt = 0x01, kUnord = 0x03, kNle = 0x06, kGt = 0x0E;

// The generator: one kernel, both its full-vector body and its masked tail.
class Gen : public Xbyak::CodeGenerator {
 public:
  struct Plan {
    const FusedStep* step;
    std::vector<int> zmm_of;     // per instruction: its value's register (-1: none)
    std::vector<int> ptr_of;     // per instruction: a vector load's pointer register index
    std::vector<int> store_ptr;  // per store: its pointer register index
    std::vector<int> store_zmm;  // per store: the register it writes
    std::vector<std::pair<int, int>> hoisted;  // (register, consts index) loaded once
    std::vector<int> srcs_zmm[2];              // per instruction: operands' registers
  };

  // `pool` gathers the constants the code reads (JitKernel keeps it beside the code).
  Gen(const Plan& plan, std::vector<uint32_t>& pool, int singles, int n_in, bool stream)
      : Xbyak::CodeGenerator(1 << 16), pool_(pool), singles_(singles) {
    using namespace Xbyak;
    const Reg64 ptr_regs[kMaxPointers] = {rax, r9, r11, rbx, rbp, r12, r13, r14, r15};
    for (const Reg64& r : {rbx, rbp, r12, r13, r14, r15}) push(r);
    // rdi: the input pointers, rsi: the outputs', rdx: constants, rcx: begin, r8: end
    const int n_ptr = n_in + static_cast<int>(plan.store_ptr.size());
    for (int i = 0; i < n_ptr; ++i)
      mov(ptr_regs[i], i < n_in ? ptr[rdi + 8 * i] : ptr[rsi + 8 * (i - n_in)]);
    for (int i = 0; i < kMaxPointers; ++i) ptr_[i] = ptr_regs[i];
    for (auto [z, c] : plan.hoisted) vbroadcastss(Zmm(z), ptr[rdx + 4 * c]);
    mov(r10, rcx);  // i
    mov(rcx, r8);   // end
    Label loop, tail, done;
    L(loop);
    lea(r8, ptr[r10 + 16]);
    cmp(r8, rcx);
    jg(tail, T_NEAR);
    body(plan, false, stream);
    add(r10, 16);
    jmp(loop, T_NEAR);
    L(tail);
    cmp(r10, rcx);
    jge(done, T_NEAR);
    sub(rcx, r10);  // 1 to 15 left: k1 takes that many lanes
    mov(r8d, 1);
    shl(r8d, cl);
    dec(r8d);
    kmovw(k1, r8d);
    body(plan, true, false);
    L(done);
    if (stream) sfence();
    vzeroupper();
    for (const Reg64& r : {r15, r14, r13, r12, rbp, rbx}) pop(r);
    ret();
    setProtectModeRE();
  }

 private:
  std::vector<uint32_t>& pool_;
  int singles_;  // the single values come first in consts, the pool after them
  Xbyak::Reg64 ptr_[kMaxPointers];

  // a constant's byte offset in consts, added to the pool where it is new
  int offset_of(uint32_t b) {
    size_t i = 0;
    while (i < pool_.size() && pool_[i] != b) ++i;
    if (i == pool_.size()) pool_.push_back(b);
    return 4 * (singles_ + static_cast<int>(i));
  }
  // a constant as a broadcast operand (every lane), or as one 32-bit value
  Xbyak::Address c(float v) { return cbits(bits_of(v)); }
  Xbyak::Address cbits(uint32_t b) { return ptr_b[rdx + offset_of(b)]; }
  Xbyak::Address cscalar(float v) { return ptr[rdx + offset_of(bits_of(v))]; }
  static Xbyak::Zmm T(int i) { return Xbyak::Zmm(kValueRegs + i); }

  // math.h's select(k, v, d): v in the lanes of k, d's own value elsewhere
  void set_where(const Xbyak::Zmm& d, const Xbyak::Opmask& k, float v) {
    vbroadcastss(d | k, cscalar(v));
  }

  // exp_n: the nearest integer to x / ln2, as math.h rounds it
  void exp_n(const Xbyak::Zmm& fn, const Xbyak::Zmm& x) {
    constexpr float kRound = 12582912.0f;
    vmulps(fn, x, c(1.44269504088896341f));
    vaddps(fn, fn, c(kRound));
    vsubps(fn, fn, c(kRound));
  }

  // d = exp_from_n(xc, fn): (expm1_reduced(xc, fn) + 1) * 2^fn. Uses T(5), T(6), T(7).
  void exp_from_n(const Xbyak::Zmm& d, const Xbyak::Zmm& xc, const Xbyak::Zmm& fn) {
    const Xbyak::Zmm r = T(5), p = T(6), rr = T(7);
    vmovaps(r, xc);
    vfmadd231ps(r, fn, c(-0.693359375f));
    vfmadd231ps(r, fn, c(2.12194440e-4f));
    vbroadcastss(p, cscalar(1.9875691500e-4f));
    for (float k :
         {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
      vfmadd213ps(p, r, c(k));
    vmulps(rr, r, r);
    vfmadd213ps(p, rr, r);  // p * r^2 + r
    vaddps(p, p, c(1.0f));
    vcvttps2dq(rr, fn);  // 2^fn by its exponent bits
    vpaddd(rr, rr, cbits(127));
    vpslld(rr, rr, 23);
    vmulps(d, p, rr);
  }

  // d = exp_clamped(x). Uses T(3) .. T(7).
  void exp_clamped(const Xbyak::Zmm& d, const Xbyak::Zmm& x) {
    const Xbyak::Zmm xc = T(3), fn = T(4);
    vmovaps(xc, x);
    vcmpps(k2, x, c(math::kExpLo), kLt);
    set_where(xc, k2, math::kExpLo);
    vcmpps(k2, x, c(math::kExpHi), kGt);
    set_where(xc, k2, math::kExpHi);
    exp_n(fn, xc);
    vcmpps(k2, fn, c(127.0f), kGt);
    set_where(fn, k2, 127.0f);
    exp_from_n(d, xc, fn);
  }

  // d = sigmoid(x), math.h's float32 one. Uses T(1) .. T(7).
  void sigmoid(const Xbyak::Zmm& d, const Xbyak::Zmm& x) {
    const Xbyak::Zmm nx = T(1), e = T(2);
    vpxord(nx, x, cbits(0x80000000u));
    exp_clamped(e, nx);
    vaddps(e, e, c(1.0f));
    vbroadcastss(d, cscalar(1.0f));
    vdivps(d, d, e);
    vcmpps(k2, nx, c(math::kExpHi), kGt);
    vpxord(d | k2, d, d);  // 0 there
  }

  // d = tanh_f32(x). Uses T(0) .. T(7).
  void tanh(const Xbyak::Zmm& d, const Xbyak::Zmm& x) {
    const Xbyak::Zmm ax = T(0), e = T(1), fn = T(2), den = T(3), s = T(4), z = T(5);
    // x < 0 ? -x : x, as math.h writes it
    vmovaps(ax, x);
    vcmpps(k3, x, c(0.0f), kLt);
    vpxord(ax | k3, ax, cbits(0x80000000u));
    vcmpps(k4, ax, c(0.625f), kLt);  // where the odd polynomial is taken
    // tanh_denominator: e^2|x| + 1, 2|x| at most 20
    vmulps(e, ax, c(2.0f));
    vcmpps(k2, e, c(20.0f), kGt);
    set_where(e, k2, 20.0f);
    exp_n(fn, e);
    exp_from_n(den, e, fn);
    vaddps(den, den, c(1.0f));
    // tanh_from: 1 - 2 / den beyond, the polynomial near 0
    vbroadcastss(e, cscalar(2.0f));
    vdivps(e, e, den);
    const bool d_is_x = d.getIdx() == x.getIdx();  // then d is written last
    const Xbyak::Zmm big = d_is_x ? s : d;
    vbroadcastss(big, cscalar(1.0f));
    vsubps(big, big, e);
    vpxord(big | k3, big, cbits(0x80000000u));
    vmulps(z, x, x);
    const Xbyak::Zmm small = d_is_x ? e : s;
    vbroadcastss(small, cscalar(-5.70498872745e-3f));
    for (float k : {2.06390887954e-2f, -5.37397155531e-2f, 1.33314422036e-1f, -3.33332819422e-1f})
      vfmadd213ps(small, z, c(k));
    vmulps(small, small, z);
    vfmadd213ps(small, x, x);  // small * z * x + x
    vmovaps(big | k4, small);
    vcmpps(k2, x, x, kUnord);
    vmovaps(big | k2, x);
    if (d_is_x) vmovaps(d, big);
  }

  void unary(OpKind op, const Xbyak::Zmm& d, const Xbyak::Zmm& x) {
    if (op == OpKind::Neg) {
      vpxord(d, x, cbits(0x80000000u));
    } else if (op == OpKind::Abs) {
      vpandd(d, x, cbits(0x7fffffffu));
    } else if (op == OpKind::Relu) {  // x where x > 0 or NaN, else +0
      vcmpps(k2, x, c(0.0f), kNle);
      vmovaps(d | k2 | T_z, x);
    } else if (op == OpKind::Exp) {
      const Xbyak::Zmm y = T(0);
      exp_clamped(y, x);
      vcmpps(k2, x, c(math::kExpHi), kGt);
      set_where(y, k2, HUGE_VALF);
      vcmpps(k2, x, c(math::kExpLo), kLt);
      vpxord(y | k2, y, y);
      vcmpps(k2, x, x, kUnord);
      vmovaps(y | k2, x);
      vmovaps(d, y);
    } else if (op == OpKind::Tanh) {
      tanh(d, x);
    } else if (op == OpKind::Sigmoid || op == OpKind::Silu) {
      sigmoid(T(0), x);
      if (op == OpKind::Silu)
        vmulps(d, x, T(0));
      else
        vmovaps(d, T(0));
    } else if (op == OpKind::Sqrt) {
      vsqrtps(d, x);
    } else if (op == OpKind::Rsqrt) {
      vsqrtps(T(0), x);
      vbroadcastss(d, cscalar(1.0f));
      vdivps(d, d, T(0));
    } else {
      throw Xbyak::Error(Xbyak::ERR_INTERNAL);
    }
  }

  void body(const Plan& plan, bool masked, bool stream) {
    using namespace Xbyak;
    const FusedStep& st = *plan.step;
    for (size_t i = 0; i < st.program.size(); ++i) {
      const Instr& ins = st.program[i];
      const int zd = plan.zmm_of[i];
      if (ins.op == OpKind::Data) {
        if (plan.ptr_of[i] < 0) continue;  // a single value, loaded once before the loop
        const Address a = ptr[ptr_[plan.ptr_of[i]] + r10 * 4];
        if (masked)
          vmovups(Zmm(zd) | k1 | T_z, a);
        else
          vmovups(Zmm(zd), a);
        continue;
      }
      const Zmm a = Zmm(plan.srcs_zmm[0][i]);
      if (ins.src[1] < 0) {
        unary(ins.op, Zmm(zd), a);
        continue;
      }
      const Zmm b = Zmm(plan.srcs_zmm[1][i]);
      const Zmm d = Zmm(zd);
      if (ins.op == OpKind::Add)
        vaddps(d, a, b);
      else if (ins.op == OpKind::Sub)
        vsubps(d, a, b);
      else if (ins.op == OpKind::Mul)
        vmulps(d, a, b);
      else if (ins.op == OpKind::Div)
        vdivps(d, a, b);
      else
        throw Xbyak::Error(ERR_INTERNAL);
    }
    for (size_t s = 0; s < st.stores.size(); ++s) {
      const Address a = ptr[ptr_[plan.store_ptr[s]] + r10 * 4];
      const Zmm z = Zmm(plan.store_zmm[s]);
      if (masked)
        vmovups(a | k1, z);
      else if (stream)
        vmovntps(a, z);
      else
        vmovups(a, z);
    }
  }
};

}  // namespace

class JitKernel {
 public:
  std::vector<int> vector_loads;           // loads read as vectors, in the kernel's input order
  std::vector<int> single_loads;           // loads read as one value each, after the pool in consts
  std::vector<uint32_t> pool;              // the constants of the ops
  std::unique_ptr<Gen> code, code_stream;  // the second where stores stream
  Fn fn = nullptr, fn_stream = nullptr;
};

bool jit_available() {
  return has_avx512();
}

std::shared_ptr<const JitKernel> compile_jit(const FusedStep& st) {
  if (!jit_available() || st.stores.empty()) return nullptr;
  for (const View& v : st.loads)
    if (v.dtype != DType::float32 || !(v.is_single_value() || v.is_contiguous())) return nullptr;
  for (const auto& s : st.stores)
    if (s.dst.dtype != DType::float32 || !s.dst.is_contiguous()) return nullptr;

  auto k = std::make_shared<JitKernel>();
  const size_t n = st.program.size();
  Gen::Plan plan;
  plan.step = &st;
  plan.zmm_of.assign(n, -1);
  plan.ptr_of.assign(n, -1);
  for (auto& v : plan.srcs_zmm) v.assign(n, -1);
  // One value per instruction; the last instruction that reads each (n: a store's, kept).
  std::vector<int> reg_val(static_cast<size_t>(std::max(st.num_regs, 1)), -1);
  std::vector<int64_t> last_use(n, -1);
  std::vector<int> src_val[2] = {std::vector<int>(n, -1), std::vector<int>(n, -1)};
  for (size_t i = 0; i < n; ++i) {
    const Instr& ins = st.program[i];
    if (ins.dtype != DType::float32) return nullptr;
    if (ins.op == OpKind::Data) {
      if (ins.load < 0) return nullptr;
    } else {
      const int arity = ins.src[1] >= 0 ? 2 : 1;
      if (!takes(ins.op) || ins.in_dtype != DType::float32 || ins.src[2] >= 0 ||
          ir::op_info(ins.op).arity != arity)
        return nullptr;
      for (int j = 0; j < arity; ++j) {
        const int v = reg_val[static_cast<size_t>(ins.src[j])];
        if (v < 0) return nullptr;
        src_val[j][i] = v;
        last_use[static_cast<size_t>(v)] = static_cast<int64_t>(i);
      }
    }
    reg_val[static_cast<size_t>(ins.dst)] = static_cast<int>(i);
  }
  std::vector<int> stored_val;
  for (const auto& s : st.stores) {
    const int v = reg_val[static_cast<size_t>(s.reg)];
    if (v < 0) return nullptr;
    last_use[static_cast<size_t>(v)] = static_cast<int64_t>(n);
    stored_val.push_back(v);
  }
  // Registers: a single value's for the whole kernel (loaded before the loop), the others
  // from their instruction to their last reader.
  std::vector<char> free_reg(kValueRegs, 1), hoisted(n, 0);
  auto take = [&]() {
    for (int r = 0; r < kValueRegs; ++r)
      if (free_reg[static_cast<size_t>(r)]) {
        free_reg[static_cast<size_t>(r)] = 0;
        return r;
      }
    return -1;
  };
  for (size_t i = 0; i < n; ++i) {
    const Instr& ins = st.program[i];
    if (ins.op != OpKind::Data || !st.loads[static_cast<size_t>(ins.load)].is_single_value())
      continue;
    plan.zmm_of[i] = take();
    if (plan.zmm_of[i] < 0) return nullptr;
    hoisted[i] = 1;
    plan.hoisted.push_back({plan.zmm_of[i], static_cast<int>(k->single_loads.size())});
    k->single_loads.push_back(ins.load);
  }
  int n_ptr = 0;
  for (size_t i = 0; i < n; ++i) {
    if (hoisted[i]) continue;
    const Instr& ins = st.program[i];
    if (ins.op == OpKind::Data) {  // one pointer per place read (lowering may list it twice)
      const View& v = st.loads[static_cast<size_t>(ins.load)];
      auto same_place = [&](int p) {
        const View& w = st.loads[static_cast<size_t>(k->vector_loads[static_cast<size_t>(p)])];
        return w.storage == v.storage && w.offset == v.offset;
      };
      int p = 0;
      while (p < n_ptr && !same_place(p)) ++p;
      if (p == n_ptr) {
        ++n_ptr;
        k->vector_loads.push_back(ins.load);
      }
      plan.ptr_of[i] = p;
    }
    for (int j = 0; j < 2; ++j) {  // operands read for the last time free their registers
      const int v = src_val[j][i];
      if (v < 0) continue;
      plan.srcs_zmm[j][i] = plan.zmm_of[static_cast<size_t>(v)];
      if (last_use[static_cast<size_t>(v)] == static_cast<int64_t>(i) &&
          !hoisted[static_cast<size_t>(v)])
        free_reg[static_cast<size_t>(plan.zmm_of[static_cast<size_t>(v)])] = 1;
    }
    plan.zmm_of[i] = take();
    if (plan.zmm_of[i] < 0) return nullptr;
    if (last_use[i] < 0) free_reg[static_cast<size_t>(plan.zmm_of[i])] = 1;  // read by no one
  }
  const int n_in = n_ptr;
  for (size_t s = 0; s < st.stores.size(); ++s) {
    plan.store_ptr.push_back(n_ptr++);
    plan.store_zmm.push_back(plan.zmm_of[static_cast<size_t>(stored_val[s])]);
  }
  if (n_ptr > kMaxPointers) return nullptr;
  try {
    const int singles = static_cast<int>(k->single_loads.size());
    k->code = std::make_unique<Gen>(plan, k->pool, singles, n_in, false);
    k->fn = k->code->getCode<Fn>();
    if (st.stream_stores) {
      k->code_stream = std::make_unique<Gen>(plan, k->pool, singles, n_in, true);
      k->fn_stream = k->code_stream->getCode<Fn>();
    }
  } catch (const Xbyak::Error&) {
    return nullptr;
  }
  return k;
}

bool run_jit(const FusedStep& st, const RunContext& ctx) {
  const JitKernel& k = *st.jit;
  const int64_t total = st.shape.numel();
  const float* in[kMaxPointers];
  float* out[kMaxPointers];
  const size_t n_in = k.vector_loads.size(), n_out = st.stores.size();
  for (size_t i = 0; i < n_in; ++i) {
    const View& v = st.loads[static_cast<size_t>(k.vector_loads[i])];
    in[i] = reinterpret_cast<const float*>(ctx.base[v.storage]) + v.offset;
  }
  bool aligned = true;
  for (size_t i = 0; i < n_out; ++i) {
    const View& v = st.stores[i].dst;
    out[i] = reinterpret_cast<float*>(ctx.base[v.storage]) + v.offset;
    aligned = aligned && reinterpret_cast<uintptr_t>(out[i]) % 64 == 0;
    // an output over an input at another place: the interpreter's tiles read before they write
    for (size_t j = 0; j < n_in; ++j)
      if (out[i] != in[j] && out[i] < in[j] + total && in[j] < out[i] + total) return false;
  }
  thread_local std::vector<float> consts;
  consts.resize(k.single_loads.size() + k.pool.size());
  for (size_t i = 0; i < k.single_loads.size(); ++i) {
    const View& v = st.loads[static_cast<size_t>(k.single_loads[i])];
    consts[i] = v.is_scalar() ? static_cast<float>(ctx.scalar(v).f)
                              : reinterpret_cast<const float*>(ctx.base[v.storage])[v.offset];
  }
  std::memcpy(consts.data() + k.single_loads.size(), k.pool.data(), k.pool.size() * 4);
  const Fn fn = k.fn_stream != nullptr && aligned ? k.fn_stream : k.fn;
  const float* c = consts.data();
  const int64_t tiles = (total + kTileFloats - 1) / kTileFloats;
  runtime::parallel_for(tiles, 4, [&](int64_t t0, int64_t t1) {
    fn(in, out, c, t0 * kTileFloats, std::min(t1 * kTileFloats, total));
  });
  metrics::jit_fused_runs.add();
  return true;
}

#else  // no Xbyak: every fused step is interpreted

class JitKernel {};

bool jit_available() {
  return false;
}

std::shared_ptr<const JitKernel> compile_jit(const FusedStep&) {
  return nullptr;
}

bool run_jit(const FusedStep&, const RunContext&) {
  return false;
}

#endif

}  // namespace lazytrace::cpu
