// Fused elementwise steps as native AVX-512 or AVX2 code (jit_elementwise.h). Each op is
// emitted as the instructions the interpreter's vector loops run for math.h's formula: the
// same operations in the same order, each FMA where math.h calls fma, so both give the same
// bits (jit_test checks them against the interpreter over every special value and a sweep of
// floats, for both instruction sets). The kernel runs rows of the step's views, a stride
// apart (the last dim, once every dim the views allow is merged), 16 or 8 floats at a time
// from `begin` to `end` of each row, a masked pass for the last few.
#include "backends/cpu/jit_elementwise.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/math.h"
#include "backends/cpu/value_ranges.h"
#include "metrics/known.h"
#include "runtime/thread_pool.h"

#if LAZYTRACE_HAVE_XBYAK
#include <unistd.h>
#include <xbyak/xbyak.h>
#endif

namespace lazytrace::cpu {

#if LAZYTRACE_HAVE_XBYAK

namespace {

using ir::OpKind;

constexpr int kTileFloats = 1024;        // a task of parallel_for: as fused.cpp's tiles
constexpr int kMaxVectors = 8;           // vectors interleaved in one pass of the loop ...
constexpr int kInterleavedBytes = 4096;  // ... whose code takes at most this much
constexpr int kMaxPointers = 11;         // loads read as vectors or per row, and stores

// The kernel's one argument: each pointer at its first row (inner index 0) and the bytes it
// moves from one row to the next; rows of the inner range [begin, end).
struct Args {
  const char* ptr[kMaxPointers];  // inputs, then the stores'
  int64_t row_step[kMaxPointers];
  const float* consts;  // the single values, then the ops' constants
  int64_t rows, begin, end;
};
using Fn = void (*)(Args*);

// How an instruction's value reaches its register.
enum class Load : uint8_t {
  None,    // an op's result
  Single,  // one value for the whole step: loaded once, before the loop
  Row,     // one value per row (inner stride 0): loaded at each row's start
  Vector,  // float32, inner stride 1
  Bool,    // bool bytes, inner stride 1, widened to 32-bit lanes of 0 or 1
};

bool takes(OpKind op) {
  for (OpKind k :
       {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Neg, OpKind::Abs, OpKind::Relu,
        OpKind::Exp, OpKind::Tanh, OpKind::Sigmoid, OpKind::Silu, OpKind::Erf, OpKind::Gelu,
        OpKind::Log, OpKind::Sqrt, OpKind::Rsqrt, OpKind::Where})
    if (op == k) return true;
  return ir::is_compare(op);
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// vcmpps predicates: math::compare's C++ operators (ordered, but != true on NaN)
constexpr uint8_t kEq = 0x00, kLt = 0x01, kLe = 0x02, kUnord = 0x03, kNe = 0x04, kGe = 0x0D,
                  kGt = 0x0E;
constexpr uint8_t kNotGe = 0x19;  // math.h's !(a >= b): true on NaN

uint8_t predicate(OpKind op) {
  return op == OpKind::Eq   ? kEq
         : op == OpKind::Ne ? kNe
         : op == OpKind::Lt ? kLt
         : op == OpKind::Le ? kLe
         : op == OpKind::Gt ? kGt
                            : kGe;
}

// The plan the generator follows: where each value lives, read from compile_jit's analysis.
struct Plan {
  const FusedStep* step;
  std::vector<int> reg_of;  // per instruction: its value's register (-1: none, or in memory)
  // the loop's first part, several vectors at a time (pass jit_interleave): per vector, per
  // instruction, its value's register, as many vectors as the registers and a row allow (a
  // single or row value's register is reg_of's; on AVX2, kLoadsInPlace, a float load has
  // none: it is read where it is used). The generator may run fewer, where their code would
  // outgrow kInterleavedBytes.
  std::vector<std::vector<int>> reg_of_vectors;
  std::vector<int> const_of;  // per instruction: a single value's index in consts (-1: none)
  // per instruction: an exp, tanh, sigmoid or silu whose operand never leaves the range it
  // needs no clamps for (pass jit_ranges, value_ranges.h): its clamps and fix-ups left out
  std::vector<char> ranged;
  std::vector<Load> load;    // per instruction
  std::vector<int> ptr_of;   // per instruction: a Vector, Bool or Row load's pointer
  std::vector<int> srcs[3];  // per instruction: its operands' instructions
  struct RowValue {
    int reg, ptr;
    bool boolean;
    bool bf16 = false;  // a bfloat16 value, widened
  };
  std::vector<RowValue> rows;  // loaded at each row's start
  // the ops' constants kept in registers of their own (pass jit_constants): bits, register
  std::vector<std::pair<uint32_t, int>> pinned;
  std::vector<int> store_ptr, store_val;  // per store: its pointer, the instruction it writes
  int n_ptr = 0;
};

// The vector instruction sets the generator writes for: AVX-512 (zmm, 16 floats, masks in
// k registers, constants broadcast from one value) and AVX2 with FMA (ymm, 8 floats, masks
// in vector registers, constants as whole vectors in memory).
struct Avx512 {
  using Vec = Xbyak::Zmm;
  static constexpr int kLanes = 16;
  static constexpr int kValueRegs = 24;  // zmm0..23 hold values, zmm24..31 are the ops' scratch
  static constexpr bool kSinglesInRegs = true;  // single values loaded once, into registers
  static constexpr bool kLoadsInPlace = false;  // the interleaved vectors' loads: registers
};
struct Avx2 {
  using Vec = Xbyak::Ymm;
  static constexpr int kLanes = 8;
  // ymm0..4 hold values, ymm5..12 are the ops' scratch, ymm13 their mask, ymm14 an operand
  // read from memory, ymm15 the tail's lanes
  static constexpr int kValueRegs = 5;
  static constexpr bool kSinglesInRegs = false;  // read from memory where an op uses them
  // the interleaved vectors' loads too, so that each vector needs fewer of the 5 registers
  static constexpr bool kLoadsInPlace = true;
};

// The generator: one kernel, its rows, each with a full-vector body and a masked tail.
template <typename Isa>
class Gen : public Xbyak::CodeGenerator {
 public:
  using Vec = typename Isa::Vec;
  static constexpr bool kWide = std::is_same_v<Isa, Avx512>;
  static constexpr int kLanes = Isa::kLanes;

  // `pool` gathers the constants the code reads (JitKernel keeps it beside the code); the
  // single values come first in consts, `singles` of them, each `kCopies` floats wide.
  Gen(const Plan& plan, std::vector<uint32_t>& pool, int singles, bool stream)
      : Xbyak::CodeGenerator(4096, Xbyak::AutoGrow), plan_(plan), pool_(pool), singles_(singles) {
    using namespace Xbyak;
    const Reg64 ptr_regs[kMaxPointers] = {rax, rcx, rsi, r9, r11, rbx, rbp, r12, r13, r14, r15};
    for (int i = 0; i < kMaxPointers; ++i) ptr_[i] = ptr_regs[i];
    for (const Reg64& r : {rbx, rbp, r12, r13, r14, r15}) push(r);
    // rdi: Args (its rows counted down in place), rdx: constants, r10: the inner index
    const auto arg = [&](size_t offset) { return ptr[rdi + static_cast<int>(offset)]; };
    mov(rdx, arg(offsetof(Args, consts)));
    mov(r8, arg(offsetof(Args, end)));  // the lanes of each row's last, masked pass
    sub(r8, arg(offsetof(Args, begin)));
    and_(r8d, kLanes - 1);
    if constexpr (kWide) {
      mov(ecx, r8d);
      mov(r8d, 1);
      shl(r8d, cl);
      dec(r8d);
      kmovw(k1, r8d);
    } else {  // from a table of 8 lanes on, 8 off
      const int table = offset_of_table();
      neg(r8);
      vmovdqu(tail_mask_, ptr[rdx + r8 * 4 + table + 32]);
    }
    for (int i = 0; i < plan.n_ptr; ++i) mov(ptr_[i], arg(offsetof(Args, ptr) + 8 * i));
    if constexpr (Isa::kSinglesInRegs)
      for (size_t i = 0; i < plan.const_of.size(); ++i)
        if (plan.const_of[i] >= 0) vbroadcastss(V(plan.reg_of[i]), single(i));
    for (const auto& [bits, reg] : plan.pinned) vbroadcastss(V(reg), ptr[rdx + offset_of(bits)]);
    Label row, loop, tail, row_end;
    L(row);
    for (const Plan::RowValue& v : plan.rows) {
      if (v.boolean || v.bf16) {  // widened to 32-bit lanes: 0 or 1, or a bfloat16's float
        if (v.boolean) {
          movzx(r8d, byte[ptr_[v.ptr]]);
        } else {
          movzx(r8d, word[ptr_[v.ptr]]);
          shl(r8d, 16);
        }
        vmovd(Xmm(v.reg), r8d);
        vpbroadcastd(V(v.reg), Xmm(v.reg));
      } else {
        vbroadcastss(V(v.reg), ptr[ptr_[v.ptr]]);
      }
    }
    mov(r10, arg(offsetof(Args, begin)));
    Label interleaved;  // first, while they remain, several vectors at a time (below)
    if (plan.reg_of_vectors.size() > 1) jmp(interleaved, T_NEAR);
    L(loop);
    lea(r8, ptr[r10 + kLanes]);
    cmp(r8, arg(offsetof(Args, end)));
    jg(tail, T_NEAR);
    const size_t body_at = getSize();
    body(false, stream);
    const size_t body_bytes = getSize() - body_at;
    add(r10, kLanes);
    jmp(loop, T_NEAR);
    L(tail);
    cmp(r10, arg(offsetof(Args, end)));
    jge(row_end, T_NEAR);
    body(true, false);
    L(row_end);
    for (int i = 0; i < plan.n_ptr; ++i) add(ptr_[i], arg(offsetof(Args, row_step) + 8 * i));
    dec(qword[rdi + static_cast<int>(offsetof(Args, rows))]);
    jnz(row, T_NEAR);
    if (stream) sfence();
    vzeroupper();
    for (const Reg64& r : {r15, r14, r13, r12, rbp, rbx}) pop(r);
    ret();
    if (plan.reg_of_vectors.size() > 1) {
      vectors_ = static_cast<int>(std::min(plan.reg_of_vectors.size(),
                                           std::max<size_t>(1, kInterleavedBytes / body_bytes)));
      L(interleaved);
      if (vectors_ > 1) {
        lea(r8, ptr[r10 + vectors_ * kLanes]);
        cmp(r8, arg(offsetof(Args, end)));
        jg(loop, T_NEAR);
        body_interleaved(stream);
        add(r10, vectors_ * kLanes);
        jmp(interleaved, T_NEAR);
      } else {
        jmp(loop, T_NEAR);
      }
    }
    readyRE();
  }

  // The constants unary(op) loads whole into a register (load_const): a polynomial's first
  // coefficient, a division's numerator. Where the plan keeps them in registers of their own
  // (jit_constants), a move replaces each broadcast, and the broadcasts' share of the pipes
  // goes to the ops.
  static std::vector<float> constants_of(OpKind op) {
    using K = OpKind;
    if (op == K::Exp) return {math::kExpP[0]};
    if (op == K::Tanh) return {math::kExpP[0], 2.0f, math::kTanhP[0]};
    if (op == K::Sigmoid || op == K::Silu) return {math::kExpP[0], 1.0f};
    if (op == K::Erf || op == K::Gelu)
      return {math::kErfP[0], 0.6666666666666666f, math::kErfQ[0], math::kExpP[0]};
    if (op == K::Log) return {math::kLogP[0]};
    if (op == K::Rsqrt) return {1.0f};
    return {};
  }

  /** Vectors of 16 or 8 floats in each pass of the loop's first part. */
  int vectors() const { return vectors_; }

  /** Floats per single value in consts: one broadcast to a register, or a whole vector. */
  static constexpr int kCopies = Isa::kSinglesInRegs ? 1 : kLanes;

 private:
  const Plan& plan_;
  std::vector<uint32_t>& pool_;
  int singles_;
  int vectors_ = 1;
  // the vector the body is writing: its instructions' registers, its bytes past r10 * 4
  const std::vector<int>* regs_ = &plan_.reg_of;
  int disp_ = 0;
  Xbyak::Reg64 ptr_[kMaxPointers];
  // AVX2's fixed registers (Avx2's comment); AVX-512 uses k1 for the tail and k2 for masks
  const Xbyak::Ymm mask_{13}, staged_{14}, tail_mask_{15};

  static Vec V(int i) { return Vec(i); }
  static Vec T(int i) { return Vec(Isa::kValueRegs + i); }

  // a constant's byte offset in consts, added to the pool where it is new (AVX2: 8 copies)
  int offset_of(uint32_t b) {
    constexpr size_t n = kWide ? 1 : kLanes;
    size_t i = 0;
    while (i < pool_.size() && pool_[i] != b) i += n;
    if (i >= pool_.size()) pool_.insert(pool_.end(), n, b);
    return 4 * (singles_ * kCopies + static_cast<int>(i));
  }
  int offset_of_table() {
    const int at = 4 * (singles_ * kCopies + static_cast<int>(pool_.size()));
    pool_.insert(pool_.end(), 8, 0xffffffffu);
    pool_.insert(pool_.end(), 8, 0u);
    return at;
  }
  // a constant as a whole-vector operand, or as one 32-bit value (to broadcast)
  Xbyak::Address cbits(uint32_t b) {
    if constexpr (kWide)
      return ptr_b[rdx + offset_of(b)];
    else
      return ptr[rdx + offset_of(b)];
  }
  Xbyak::Address c(float v) { return cbits(bits_of(v)); }
  Xbyak::Address cscalar(float v) { return ptr[rdx + offset_of(bits_of(v))]; }
  Xbyak::Address single(size_t i) { return ptr[rdx + 4 * kCopies * plan_.const_of[i]]; }

  // d = v, from its register where the plan keeps it in one (jit_constants), else broadcast
  void load_const(const Vec& d, float v) {
    for (const auto& [bits, reg] : plan_.pinned)
      if (bits == bits_of(v)) return vmovaps(d, V(reg));
    vbroadcastss(d, cscalar(v));
  }

  // The masks of math.h's selects: cmp sets the mask, the others use it.
  void cmpmask(const Vec& a, const Xbyak::Operand& b, uint8_t pred) {
    if constexpr (kWide)
      vcmpps(k2, a, b, pred);
    else
      vcmpps(mask_, a, b, pred);
  }
  void set_where(const Vec& d, float v) {  // d = mask ? v : d
    if constexpr (kWide)
      vbroadcastss(d | k2, cscalar(v));
    else
      vblendvps(d, d, c(v), mask_);
  }
  void zero_where(const Vec& d) {  // d = mask ? 0 : d
    if constexpr (kWide)
      vpxord(d | k2, d, d);
    else
      vandnps(d, mask_, d);
  }
  void move_where(const Vec& d, const Vec& x) {  // d = mask ? x : d
    if constexpr (kWide)
      vmovaps(d | k2, x);
    else
      vblendvps(d, d, x, mask_);
  }
  void or_regs(const Vec& d, const Vec& a, const Vec& b) {
    if constexpr (kWide)
      vpord(d, a, b);
    else
      vorps(d, a, b);
  }
  void xor_bits(const Vec& d, const Vec& x, uint32_t b) {
    if constexpr (kWide)
      vpxord(d, x, cbits(b));
    else
      vxorps(d, x, cbits(b));
  }
  void and_bits(const Vec& d, const Vec& x, uint32_t b) {
    if constexpr (kWide)
      vpandd(d, x, cbits(b));
    else
      vandps(d, x, cbits(b));
  }

  // exp_n: the nearest integer to x / ln2, ties to even, as math.h's adding and subtracting
  // 1.5 * 2^23 rounds it (the two differ only in the sign of a zero, which no result keeps);
  // `negated`: of -x, from x (rounding to nearest is symmetric: the same bits)
  void exp_n(const Vec& fn, const Vec& x, bool negated = false) {
    constexpr uint8_t kNearest = 0x08;  // to nearest even, no inexact exception
    vmulps(fn, x, c(negated ? -1.44269504088896341f : 1.44269504088896341f));
    if constexpr (kWide)
      vrndscaleps(fn, fn, kNearest);
    else
      vroundps(fn, fn, kNearest);
  }

  // d = x where x is NaN: math.h's select(x != x, x, d)
  void keep_nan(const Vec& d, const Vec& x) {
    if constexpr (kWide) {
      vfixupimmps(d, x, cbits(0x11), 0);  // x's class QNaN or SNaN: x; any other: d
    } else {
      cmpmask(x, x, kUnord);
      move_where(d, x);
    }
  }

  // d = exp_from_n(xc, fn): e^r 2^fn for math.h's r, by ln2 in two parts or (tanh, math.h's
  // tanh_denominator) in one; 2^fn by vscalefps, or fn added to the exponent bits, exact
  // either way. `negated`: e^-xc from xc and exp_n's fn of -xc, without -xc: the register
  // r holds -r, and the polynomial's steps in it give math.h's values times -1 or 1 (rounding
  // to nearest is symmetric), the last one math.h's own: the same bits. Uses T(5), T(6), T(7).
  void exp_from_n(const Vec& d, const Vec& xc, const Vec& fn, bool one_part = false,
                  bool negated = false) {
    const Vec r = T(5), p = T(6), rr = T(7);
    const float s = negated ? -1.0f : 1.0f;
    vmovaps(r, xc);
    if (one_part) {
      vfmadd231ps(r, fn, c(s * -0.693147182f));
    } else {
      vfmadd231ps(r, fn, c(s * -0.693359375f));
      vfmadd231ps(r, fn, c(s * 2.12194440e-4f));
    }
    // the step that adds coefficient i gives (-1)^(n - 1 - i) times math.h's where negated
    constexpr size_t n = std::size(math::kExpP);
    auto sign = [&](size_t i) { return negated && (n - 1 - i) % 2 == 1 ? -1.0f : 1.0f; };
    load_const(p, sign(0) * math::kExpP[0]);
    for (size_t i = 1; i < n; ++i) vfmadd213ps(p, r, c(sign(i) * math::kExpP[i]));
    vmulps(rr, r, r);
    if (negated)
      vfmsub213ps(p, rr, r);  // p * r^2 - (-r)
    else
      vfmadd213ps(p, rr, r);  // p * r^2 + r
    vaddps(p, p, c(1.0f));
    if constexpr (kWide) {
      vscalefps(d, p, fn);
    } else {
      vcvttps2dq(rr, fn);
      vpslld(rr, rr, 23);
      vpaddd(d, p, rr);
    }
  }

  // d = e^x (`negated`: e^-x, from x) for x (-x) in exp's range, n in fn. Uses T(5) .. T(7).
  void exp_of(const Vec& d, const Vec& x, const Vec& fn, bool negated = false) {
    exp_n(fn, x, negated);
    exp_from_n(d, x, fn, false, negated);
  }

  // d = exp_clamped(x) (`negated`: of -x, from x), but for a NaN x. Uses T(3) .. T(7).
  void exp_clamped(const Vec& d, const Vec& x, bool negated = false) {
    const Vec xc = T(3), fn = T(4);
    if (negated) {                      // -(-x clamped): x clamped to the range negated
      vminps(xc, x, c(-math::kExpLo));  // a NaN x becomes -kExpLo: the caller's keep_nan
      vmaxps(xc, xc, c(-math::kExpHi));
    } else {
      vmaxps(xc, x, c(math::kExpLo));  // a NaN x becomes kExpLo: the caller's keep_nan
      vminps(xc, xc, c(math::kExpHi));
    }
    exp_of(d, xc, fn, negated);
  }

  // d = sigmoid(x), math.h's float32 one; `ranged`: for -x in [kExpLo, 88], or NaN. e^-x
  // by exp's steps negated, from x. Uses T(2) .. T(7).
  void sigmoid(const Vec& d, const Vec& x, bool ranged) {
    const Vec e = T(2);
    if (ranged) {
      exp_of(e, x, T(4), true);
    } else {
      exp_clamped(e, x, true);
    }
    vaddps(e, e, c(1.0f));
    load_const(d, 1.0f);
    vdivps(d, d, e);
    if (ranged) return;
    cmpmask(x, c(-math::kExpHi), kLt);  // -x > kExpHi
    zero_where(d);                      // 0 there
    keep_nan(d, x);
  }

  // d = tanh_f32(x); `ranged`: for x in [-10, 10], or NaN. Uses T(0) .. T(7). |x| by its bits
  // gives math.h's x < 0 ? -x : x wherever the result depends on it (they differ at -0 and at
  // NaN, where the polynomial and x itself are taken).
  void tanh(const Vec& d, const Vec& x, bool ranged) {
    const Vec ax = T(0), e = T(1), fn = T(2), den = T(3), s = T(4), z = T(5);
    and_bits(ax, x, 0x7fffffffu);
    // tanh_denominator: e^2|x| + 1, 2|x| at most 20
    vaddps(e, ax, ax);                    // 2|x|: an add, on the pipes FMAs leave free
    if (!ranged) vminps(e, e, c(20.0f));  // a NaN takes the polynomial below
    exp_n(fn, e);
    exp_from_n(den, e, fn, true);
    vaddps(den, den, c(1.0f));
    // tanh_from: 1 - 2 / den beyond, the polynomial near 0, with x's sign
    load_const(e, 2.0f);
    vdivps(e, e, den);
    const bool d_is_x = d.getIdx() == x.getIdx();  // then d is written last
    const Vec r = d_is_x ? s : d;
    vsubps(r, e, c(1.0f));  // -(1 - 2 / den), exactly: x's sign is put on below
    vmulps(z, x, x);
    const Vec small = d_is_x ? e : s;
    load_const(small, math::kTanhP[0]);
    for (size_t i = 1; i < std::size(math::kTanhP); ++i) vfmadd213ps(small, z, c(math::kTanhP[i]));
    vmulps(small, small, z);
    vfmadd213ps(small, x, x);        // small * z * x + x
    cmpmask(ax, c(0.625f), kNotGe);  // a NaN's polynomial is NaN
    move_where(r, small);
    // math.h's copysign(r, x): the big branch's sign, and -0's (the polynomial gives +0)
    if constexpr (kWide) {
      vpternlogd(r, x, cbits(0x80000000u), 0xd8);  // sign ? x : r, bit by bit
    } else {
      vxorps(fn, r, x);
      and_bits(fn, fn, 0x80000000u);
      vxorps(r, r, fn);
    }
    if (d_is_x) vmovaps(d, r);
  }

  // T(3) = erf_f32 of a value whose |.| is in T(0), with the sign and NaN of x (erf's own
  // argument, or gelu's x, which has those of x / sqrt 2). Uses T(0) .. T(7).
  void erf_of_abs(const Vec& x) {
    const Vec a = T(0), p = T(1), small = T(2), b = T(3), y = T(4), q = T(1), e = T(4);
    vmulps(small, a, a);  // z, until the polynomial in it is done
    load_const(p, math::kErfP[0]);
    for (size_t i = 1; i < std::size(math::kErfP); ++i)
      vfmadd213ps(p, small, c(math::kErfP[i]));  // p * z + k
    vmovaps(small, p);
    vfmadd213ps(small, a, a);  // p * a + a
    vminps(b, a, c(4.0f));     // a < 4 ? a : 4
    load_const(y, 0.6666666666666666f);
    vfmadd213ps(y, b, c(-1.6666666666666667f));
    load_const(q, math::kErfQ[0]);
    for (size_t i = 1; i < std::size(math::kErfQ); ++i) vfmadd213ps(q, y, c(math::kErfQ[i]));
    vmulps(e, b, b);  // e^-(b * b), by exp's steps negated
    exp_of(b, e, b, true);
    vfnmadd213ps(b, q, c(1.0f));  // 1 - e^-b^2 q
    cmpmask(a, c(1.0f), kNotGe);  // a NaN's polynomial is NaN
    move_where(b, small);
    and_bits(small, x, 0x80000000u);  // x's sign on the result, which has none
    or_regs(b, b, small);
  }

  // d = log_f32(x). Uses T(0) .. T(3).
  void log(const Vec& d, const Vec& x) {
    const Vec m = T(0), k = T(1), p = T(2), r = T(3);
    cmpmask(x, c(1.17549435e-38f), kLt);  // tiny: subnormal, or not positive
    vmovaps(m, x);
    vmulps(k, x, c(8388608.0f));
    move_where(m, k);
    vpaddd(m, m, cbits(0x3f800000u - 0x3f3504f3u));
    vpsrld(k, m, 23);
    vpsubd(k, k, cbits(127));
    if constexpr (kWide) {
      vpsubd(k | k2, k, cbits(23));
    } else {
      vandps(p, mask_, cbits(23));
      vpsubd(k, k, p);
    }
    vcvtdq2ps(k, k);
    and_bits(m, m, 0x007fffffu);
    vpaddd(m, m, cbits(0x3f3504f3u));
    vsubps(m, m, c(1.0f));  // f
    load_const(p, math::kLogP[0]);
    for (size_t i = 1; i < std::size(math::kLogP); ++i) vfmadd213ps(p, m, c(math::kLogP[i]));
    vfmadd213ps(p, m, c(-0.5f));  // f p - 0.5
    vmulps(r, m, m);
    vmulps(r, r, p);
    vfmadd231ps(r, k, c(-2.12194440e-4f));
    vaddps(r, r, m);
    vfmadd231ps(r, k, c(0.693359375f));
    cmpmask(x, c(0.0f), kEq);
    set_where(r, -HUGE_VALF);
    cmpmask(x, c(HUGE_VALF), kEq);
    set_where(r, HUGE_VALF);
    cmpmask(x, c(0.0f), kLt);
    set_where(r, NAN);
    keep_nan(r, x);
    vmovaps(d, r);
  }

  void unary(OpKind op, const Vec& d, const Vec& x, bool ranged) {
    if (op == OpKind::Neg) {
      xor_bits(d, x, 0x80000000u);
    } else if (op == OpKind::Abs) {
      and_bits(d, x, 0x7fffffffu);
    } else if (op == OpKind::Relu) {  // x where x > 0 or NaN, else +0
      vxorps(T(0), T(0), T(0));       // max(+0, x), which is x where x is NaN, and -0 for -0: |.|
      vmaxps(d, T(0), x);
      and_bits(d, d, 0x7fffffffu);
    } else if (op == OpKind::Exp && ranged) {  // x in [kExpLo, 88], or NaN
      exp_of(d, x, T(4));
    } else if (op == OpKind::Exp) {
      const Vec y = T(0);
      exp_clamped(y, x);
      cmpmask(x, c(math::kExpHi), kGt);
      set_where(y, HUGE_VALF);
      cmpmask(x, c(math::kExpLo), kLt);
      zero_where(y);
      keep_nan(y, x);
      vmovaps(d, y);
    } else if (op == OpKind::Tanh) {
      tanh(d, x, ranged);
    } else if (op == OpKind::Sigmoid || op == OpKind::Silu) {
      sigmoid(T(0), x, ranged);
      if (op == OpKind::Silu)
        vmulps(d, x, T(0));
      else
        vmovaps(d, T(0));
    } else if (op == OpKind::Erf) {
      and_bits(T(0), x, 0x7fffffffu);
      erf_of_abs(x);
      vmovaps(d, T(3));
    } else if (op == OpKind::Gelu) {  // 0.5 x (1 + erf(x / sqrt 2))
      vmulps(T(0), x, c(0.70710678118654752440f));
      and_bits(T(0), T(0), 0x7fffffffu);
      erf_of_abs(x);
      vaddps(T(3), T(3), c(1.0f));
      vmulps(T(2), x, c(0.5f));
      vmulps(d, T(2), T(3));
    } else if (op == OpKind::Log) {
      log(d, x);
    } else if (op == OpKind::Sqrt) {
      vsqrtps(d, x);
    } else if (op == OpKind::Rsqrt) {
      vsqrtps(T(0), x);
      load_const(d, 1.0f);
      vdivps(d, d, T(0));
    } else {
      throw Xbyak::Error(Xbyak::ERR_INTERNAL);
    }
  }

  // f(instruction i's value as an operand): its register, or (a single value AVX2 keeps in
  // memory) its place in consts ...
  template <typename F>
  void with_operand(size_t i, F&& f) {
    if ((*regs_)[i] >= 0)
      f(V((*regs_)[i]));
    else
      f(in_memory(i));
  }
  // ... or always a register: such a value copied into the staging register.
  Vec reg(size_t i) {
    if ((*regs_)[i] >= 0) return V((*regs_)[i]);
    vmovups(staged_, in_memory(i));
    return Vec(staged_.getIdx());
  }
  // a value without a register: a single value in consts, or a load in place (AVX2's
  // interleaved vectors: whole vectors, never the masked tail's)
  Xbyak::Address in_memory(size_t i) {
    if (plan_.load[i] == Load::Vector) return ptr[ptr_[plan_.ptr_of[i]] + r10 * 4 + disp_];
    return single(i);
  }

  void load_bool(const Vec& d, const Xbyak::Reg64& p, bool masked) {
    using namespace Xbyak;
    const Xmm x = Xmm(d.getIdx());
    if (!masked) {
      vpmovzxbd(d, element(p, 1));
    } else if constexpr (kWide) {
      vmovdqu8(x | k1 | T_z, element(p, 1));
      vpmovzxbd(d, x);
    } else {  // the tail's bytes one at a time (r8: the lanes left)
      Label done;
      vpxor(x, x, x);
      for (int j = 0; j < kLanes - 1; ++j) {
        cmp(r8, j);
        jbe(done, T_NEAR);
        vpinsrb(x, x, ptr[p + r10 + j], static_cast<uint8_t>(j));
      }
      L(done);
      vpmovzxbd(d, x);
    }
  }

  // A bool's lanes (0 or 1) as bytes, plain stores (load_bool's converse)
  void store_bool(const Vec& v, size_t s, bool masked) {
    using namespace Xbyak;
    const Reg64& p = ptr_[plan_.store_ptr[s]];
    if constexpr (kWide) {
      if (!masked)
        vpmovdb(element(p, 1), v);
      else
        vpmovdb(element(p, 1) | k1, v);
    } else {  // 8 lanes: to words, to bytes, the low 8 of them
      const Xmm x = Xmm(T(0).getIdx()), hi = Xmm(T(1).getIdx());
      vextracti128(hi, v, 1);
      vpackusdw(x, Xmm(v.getIdx()), hi);
      vpackuswb(x, x, x);
      if (!masked) {
        vmovq(element(p, 1), x);
      } else {  // the tail's bytes one at a time (r8: the lanes left)
        Label done;
        for (int j = 0; j < kLanes - 1; ++j) {
          cmp(r8, j);
          jbe(done, T_NEAR);
          vpextrb(ptr[p + r10 + j], x, static_cast<uint8_t>(j));
        }
        L(done);
      }
    }
  }

  // One vector (masked: the row's last lanes) ...
  void body(bool masked, bool stream) {
    if (masked && !kWide) {
      mov(r8, ptr[rdi + static_cast<int>(offsetof(Args, end))]);
      sub(r8, r10);
    }
    for (size_t i = 0; i < plan_.step->program.size(); ++i) instr(i, masked);
    for (size_t s = 0; s < plan_.step->stores.size(); ++s) store(s, masked, stream);
  }
  // ... or vectors_ of them one after another, op by op: a long chain of dependent
  // instructions (tanh's, then sigmoid's) has the others' beside it, where one vector at a
  // time would leave the core waiting for each result more than its window can cover.
  void body_interleaved(bool stream) {
    auto each = [&](auto&& f) {
      for (int j = 0; j < vectors_; ++j) {
        regs_ = &plan_.reg_of_vectors[static_cast<size_t>(j)];
        disp_ = 4 * kLanes * j;
        f();
      }
      regs_ = &plan_.reg_of;
      disp_ = 0;
    };
    for (size_t i = 0; i < plan_.step->program.size(); ++i) each([&] { instr(i, false); });
    for (size_t s = 0; s < plan_.step->stores.size(); ++s) each([&] { store(s, false, stream); });
  }

  // element r10 of pointer p (in the vector disp_ says), of `size` bytes each
  Xbyak::Address element(const Xbyak::Reg64& p, int size) {
    return ptr[p + r10 * size + disp_ / 4 * size];
  }

  // instruction i of the step's program, for the vector regs_ and disp_ say: its value,
  // rounded to bfloat16 where that is its dtype (registers hold such values as floats)
  void instr(size_t i, bool masked) {
    const Instr& ins = plan_.step->program[i];
    compute(i, masked);
    if constexpr (kWide)
      if (ins.op != OpKind::Data && ins.dtype == DType::bfloat16) round_bf16(V((*regs_)[i]));
  }

  // d = d rounded to the nearest bfloat16, ties to even, kept as a float; a NaN quieted
  // (BFloat16::from_float's bits)
  void round_bf16(const Vec& d) {
    using namespace Xbyak;
    const Vec t = T(0);
    vpsrld(t, d, 16);
    vpandd(t, t, cbits(1));
    vpaddd(t, t, d);
    vpaddd(t, t, cbits(0x7fff));
    vcmpps(k2, d, d, kUnord);
    vpord(t | k2, d, cbits(0x00400000));
    vpandd(d, t, cbits(0xffff0000u));
  }

  void compute(size_t i, bool masked) {
    using namespace Xbyak;
    const FusedStep& st = *plan_.step;
    const Instr& ins = st.program[i];
    const Vec d = V(std::max((*regs_)[i], 0));
    if (ins.op == OpKind::Data) {
      if ((*regs_)[i] < 0) return;  // a single value, or a load read where it is used
      const Reg64& p = ptr_[std::max(plan_.ptr_of[i], 0)];
      const Address a = ptr[p + r10 * 4 + disp_];
      if (plan_.load[i] == Load::Vector &&
          st.loads[static_cast<size_t>(ins.load)].dtype == DType::bfloat16) {
        if constexpr (kWide) {  // 16 bfloat16s widened: their bits are a float's upper half
          if (!masked)
            vpmovzxwd(d, element(p, 2));
          else
            vpmovzxwd(d | k1 | T_z, element(p, 2));
          vpslld(d, d, 16);
        }
      } else if (plan_.load[i] == Load::Vector) {
        if (!masked)
          vmovups(d, a);
        else if constexpr (kWide)
          vmovups(d | k1 | T_z, a);
        else
          vmaskmovps(d, tail_mask_, a);
      } else if (plan_.load[i] == Load::Bool) {
        load_bool(d, p, masked);
      }
      return;  // Single and Row values are in their registers or consts already
    }
    const size_t s0 = static_cast<size_t>(plan_.srcs[0][i]);
    if (ins.op == OpKind::Cast) {  // float32 <-> bfloat16: the rounding is instr's
      const Vec a = reg(s0);
      if (a.getIdx() != d.getIdx()) vmovaps(d, a);
      return;
    }
    if (ins.src[1] < 0) {
      unary(ins.op, d, reg(s0), plan_.ranged[i] != 0);
      return;
    }
    const size_t s1 = static_cast<size_t>(plan_.srcs[1][i]);
    if (ins.op == OpKind::Where) {  // operand 1 where the condition holds, else operand 2
      const size_t s2 = static_cast<size_t>(plan_.srcs[2][i]);
      const Vec cond = V((*regs_)[s0]);  // a bool: always in a register
      const Vec other = reg(s2);
      if constexpr (kWide) {
        vptestmd(k2, cond, cond);
        with_operand(s1, [&](const Operand& b) { vblendmps(d | k2, other, b); });
      } else {
        vpslld(mask_, cond, 31);
        with_operand(s1, [&](const Operand& b) { vblendvps(d, other, b, mask_); });
      }
    } else if (ir::is_compare(ins.op)) {
      const Vec a = reg(s0);
      with_operand(s1, [&](const Operand& b) { cmpmask(a, b, predicate(ins.op)); });
      if constexpr (kWide)
        vpbroadcastd(d | k2 | T_z, ptr[rdx + offset_of(1)]);
      else
        vpsrld(d, mask_, 31);
    } else {
      const Vec a = reg(s0);
      with_operand(s1, [&](const Operand& b) {
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
      });
    }
  }

  void store(size_t s, bool masked, bool stream) {
    using namespace Xbyak;
    const Vec v = reg(static_cast<size_t>(plan_.store_val[s]));
    if (plan_.step->stores[s].dst.dtype == DType::bool_) return store_bool(v, s, masked);
    if (plan_.step->stores[s].dst.dtype == DType::bfloat16) {
      if constexpr (kWide) {  // the value is rounded already: its upper halves, narrowed
        const Address h = element(ptr_[plan_.store_ptr[s]], 2);
        vpsrld(T(0), v, 16);
        if (!masked)
          vpmovdw(h, T(0));
        else
          vpmovdw(h | k1, T(0));
      }
      return;
    }
    const Address a = ptr[ptr_[plan_.store_ptr[s]] + r10 * 4 + disp_];
    if (!masked)
      stream ? vmovntps(a, v) : vmovups(a, v);
    else if constexpr (kWide)
      vmovups(a | k1, v);
    else
      vmaskmovps(a, tail_mask_, v);
  }
};

// The step's iteration space with its dims merged where every view allows (size-1 dims
// dropped), and each view's strides over those dims: a transposed or broadcast view keeps
// the dims it needs, a contiguous step becomes one long row.
struct Layout {
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> strides;  // per view given
};

Layout merge_dims(const Shape& shape, const std::vector<const View*>& views) {
  Layout l;
  l.strides.resize(views.size());
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merges = !l.shape.empty();
    for (size_t v = 0; v < views.size() && merges; ++v)
      merges = l.strides[v].back() == views[v]->strides[d] * shape[d];
    if (merges)
      l.shape.back() *= shape[d];
    else
      l.shape.push_back(shape[d]);
    for (size_t v = 0; v < views.size(); ++v) {
      if (merges)
        l.strides[v].back() = views[v]->strides[d];
      else
        l.strides[v].push_back(views[v]->strides[d]);
    }
  }
  if (l.shape.empty()) {  // one element
    l.shape.push_back(1);
    for (auto& s : l.strides) s.push_back(1);
  }
  return l;
}

// With LAZYTRACE_JIT_PROFILE=1, each kernel is named in /tmp/perf-<pid>.map, where `perf
// report` finds it (as oneDNN's DNNL_JIT_PROFILE=1 names its own): "lazytrace_fused [shape]".
void name_for_perf(const Xbyak::CodeGenerator& code, const Shape& shape) {
  static const bool on = [] {
    const char* v = std::getenv("LAZYTRACE_JIT_PROFILE");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  if (!on) return;
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  const std::string path = "/tmp/perf-" + std::to_string(getpid()) + ".map";
  if (FILE* f = std::fopen(path.c_str(), "a")) {
    std::fprintf(f, "%" PRIxPTR " %zx lazytrace_fused %s\n",
                 reinterpret_cast<uintptr_t>(code.getCode()), code.getSize(), shape.str().c_str());
    std::fclose(f);
  }
}

}  // namespace

// The native code of one plan, which every fused step with that plan can run (the pass
// jit_cache): the constants it reads, and a copy whose stores stream where the step's may.
struct JitCode {
  std::vector<uint32_t> pool;
  std::unique_ptr<Xbyak::CodeGenerator> code, code_stream;
  Fn fn = nullptr, fn_stream = nullptr;
  int vectors = 1;    // at a time, in the loop's first part
  int constants = 0;  // the ops' constants kept in registers (jit_constants)
};

class JitKernel {
 public:
  struct Pointer {
    int storage;
    int64_t offset;                // elements
    std::vector<int64_t> strides;  // elements, over shape
    int64_t size;                  // bytes per element
  };
  std::vector<int64_t> shape;     // the iteration space, its dims merged (merge_dims)
  std::vector<Pointer> pointers;  // the kernel's: inputs, then stores
  size_t n_in = 0;
  std::vector<int> single_loads;  // loads read as one value each, first in consts ...
  int copies = 1;                 // ... each this many floats wide
  std::shared_ptr<const JitCode> code;
  // pass jit_ranges: where a single value that is known only at run time may spare an op its
  // clamps, the plan, to make the code for the values of a run (at most kRangedCodes sets of
  // ops spared, each made once)
  bool check_ranges = false;
  bool spares_clamps = false;  // some op runs without its clamps in `code` already
  Plan plan;
  std::shared_ptr<const JitCode> (*make)(const Plan&, int, const Shape&, bool) = nullptr;
  bool shared = true;
  mutable std::mutex mu;
  mutable std::vector<std::pair<std::vector<char>, std::shared_ptr<const JitCode>>> codes;
};

namespace {

bool wide_available() {
  static const bool yes =
      has_avx512() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  return yes;
}

template <typename Isa>
std::shared_ptr<const JitKernel> compile_for(const FusedStep& st, const JitOptions& options);

}  // namespace

bool jit_available() {
  return wide_available() || has_avx2_fma();
}

std::shared_ptr<const JitKernel> compile_jit(const FusedStep& st, const JitOptions& options) {
  if (wide_available()) return compile_for<Avx512>(st, options);
  if (has_avx2_fma()) return compile_for<Avx2>(st, options);
  return nullptr;
}

namespace {

// Everything the generator reads, as bytes: two plans with the same key make the same code.
template <typename Isa>
std::string key_of(const Plan& plan, int singles, bool stream) {
  std::vector<int32_t> w{Gen<Isa>::kWide, stream, singles, plan.n_ptr,
                         static_cast<int32_t>(plan.reg_of.size())};
  for (size_t i = 0; i < plan.reg_of.size(); ++i)
    w.insert(w.end(), {static_cast<int32_t>(plan.step->program[i].op),
                       static_cast<int32_t>(plan.step->program[i].dtype), plan.reg_of[i],
                       plan.const_of[i], static_cast<int32_t>(plan.load[i]), plan.ptr_of[i],
                       plan.srcs[0][i], plan.srcs[1][i], plan.srcs[2][i], plan.ranged[i]});
  for (const auto& m : plan.reg_of_vectors) {
    w.insert(w.end(), m.begin(), m.end());
    w.push_back(-1);
  }
  for (const Plan::RowValue& r : plan.rows) w.insert(w.end(), {r.reg, r.ptr, r.boolean, r.bf16});
  for (const auto& [bits, reg] : plan.pinned) w.insert(w.end(), {static_cast<int32_t>(bits), reg});
  w.insert(w.end(), plan.store_ptr.begin(), plan.store_ptr.end());
  w.insert(w.end(), plan.store_val.begin(), plan.store_val.end());
  return std::string(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(int32_t));
}

// The code of every plan generated in this process that a program still holds (jit_cache).
struct CodeCache {
  std::mutex mu;
  std::unordered_map<std::string, std::weak_ptr<const JitCode>> codes;
  size_t purge_at = 64;
};
CodeCache& code_cache() {
  static auto* c = new CodeCache();  // used by programs that may outlive statics
  return *c;
}

template <typename Isa>
std::shared_ptr<const JitCode> generate(const Plan& plan, int singles, const Shape& shape) {
  auto c = std::make_shared<JitCode>();
  auto code = std::make_unique<Gen<Isa>>(plan, c->pool, singles, false);
  c->fn = code->template getCode<Fn>();
  c->vectors = code->vectors();
  c->constants = static_cast<int>(plan.pinned.size());
  name_for_perf(*code, shape);
  c->code = std::move(code);
  if (plan.step->may_stream()) {
    auto streaming = std::make_unique<Gen<Isa>>(plan, c->pool, singles, true);
    c->fn_stream = streaming->template getCode<Fn>();
    name_for_perf(*streaming, shape);
    c->code_stream = std::move(streaming);
  }
  metrics::jit_kernels_made.add();
  return c;
}

template <typename Isa>
std::shared_ptr<const JitCode> code_for(const Plan& plan, int singles, const Shape& shape,
                                        bool shared) {
  if (!shared) return generate<Isa>(plan, singles, shape);
  const std::string key = key_of<Isa>(plan, singles, plan.step->may_stream());
  CodeCache& cache = code_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  std::weak_ptr<const JitCode>& slot = cache.codes[key];
  if (std::shared_ptr<const JitCode> c = slot.lock()) return c;
  std::shared_ptr<const JitCode> c = generate<Isa>(plan, singles, shape);
  slot = c;
  if (cache.codes.size() >= cache.purge_at) {  // forget the code no program holds any more
    std::erase_if(cache.codes, [](const auto& e) { return e.second.expired(); });
    cache.purge_at = std::max<size_t>(64, 2 * cache.codes.size());
  }
  return c;
}

// Per instruction: an op with clamps whose operand (`operand[i]`, an instruction) never
// reaches them, by the intervals `r` of the instructions' values (pass jit_ranges).
std::vector<char> spared_ops(const FusedStep& st, const std::vector<int>& operand,
                             const std::vector<Interval>& r) {
  std::vector<char> out(st.program.size(), 0);
  for (size_t i = 0; i < out.size(); ++i) {
    const OpKind op = st.program[i].op;
    out[i] = has_clamps(op) && needs_no_clamps(op, r[static_cast<size_t>(operand[i])]);
  }
  return out;
}

template <typename Isa>
std::shared_ptr<const JitKernel> compile_for(const FusedStep& st, const JitOptions& options) {
  if (st.stores.empty()) return nullptr;
  // float32 values, and on AVX-512 bfloat16 ones (held as floats, rounded after each op)
  constexpr bool kBf16 = std::is_same_v<Isa, Avx512>;
  auto floating = [&](DType t) { return t == DType::float32 || (kBf16 && t == DType::bfloat16); };
  std::vector<const View*> views;  // loads read per element or per row, then the stores
  bool any_bf16 = false;
  for (const View& v : st.loads) {
    if (!floating(v.dtype) && v.dtype != DType::bool_) return nullptr;
    any_bf16 = any_bf16 || v.dtype == DType::bfloat16;
    if (!v.is_single_value()) views.push_back(&v);
  }
  const size_t n_loads = views.size();
  for (const auto& s : st.stores) {
    if (!floating(s.dst.dtype) && s.dst.dtype != DType::bool_) return nullptr;
    any_bf16 = any_bf16 || s.dst.dtype == DType::bfloat16;
    views.push_back(&s.dst);
  }
  for (const View* v : views)
    for (int64_t stride : v->strides)
      if (stride < 0) return nullptr;
  const Layout lay = merge_dims(st.shape, views);
  auto strides_of = [&](const View& v) -> const std::vector<int64_t>& {
    return lay
        .strides[static_cast<size_t>(std::find(views.begin(), views.end(), &v) - views.begin())];
  };
  for (size_t v = n_loads; v < views.size(); ++v)
    if (lay.strides[v].back() != 1) return nullptr;

  auto k = std::make_shared<JitKernel>();
  k->shape = lay.shape;
  const size_t n = st.program.size();
  Plan plan;
  plan.step = &st;
  plan.reg_of.assign(n, -1);
  plan.const_of.assign(n, -1);
  plan.load.assign(n, Load::None);
  plan.ranged.assign(n, 0);
  plan.ptr_of.assign(n, -1);
  for (auto& v : plan.srcs) v.assign(n, -1);
  // One value per instruction, and whether it is a bool; the last instruction that reads
  // each (n: a store's, kept).
  std::vector<int> reg_val(static_cast<size_t>(std::max(st.num_regs, 1)), -1);
  std::vector<int64_t> last_use(n, -1);
  std::vector<char> is_bool(n, 0);
  std::vector<int> src_val[3];
  for (auto& v : src_val) v.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    const Instr& ins = st.program[i];
    if (ins.op == OpKind::Data) {
      if (ins.load < 0) return nullptr;
      const View& v = st.loads[static_cast<size_t>(ins.load)];
      if (ins.dtype != v.dtype) return nullptr;
      const bool boolean = v.dtype == DType::bool_;
      if (v.is_single_value())
        plan.load[i] = Load::Single;
      else if (strides_of(v).back() == 0)
        plan.load[i] = Load::Row;
      else if (strides_of(v).back() == 1)
        plan.load[i] = boolean ? Load::Bool : Load::Vector;
      else
        return nullptr;
      if (boolean && plan.load[i] == Load::Single) return nullptr;
      is_bool[i] = boolean;
    } else {
      const int arity = ins.src[2] >= 0 ? 3 : ins.src[1] >= 0 ? 2 : 1;
      if (!(takes(ins.op) || ins.op == OpKind::Cast) || ir::op_info(ins.op).arity != arity ||
          !floating(ins.in_dtype))
        return nullptr;
      const bool compare = ir::is_compare(ins.op);
      if (compare ? ins.dtype != DType::bool_ : !floating(ins.dtype)) return nullptr;
      any_bf16 = any_bf16 || ins.dtype == DType::bfloat16 || ins.in_dtype == DType::bfloat16;
      for (int j = 0; j < arity; ++j) {
        const int v = reg_val[static_cast<size_t>(ins.src[j])];
        if (v < 0) return nullptr;
        // only where's condition is a bool
        if (is_bool[static_cast<size_t>(v)] != (ins.op == OpKind::Where && j == 0)) return nullptr;
        src_val[j][i] = v;
        last_use[static_cast<size_t>(v)] = static_cast<int64_t>(i);
      }
      is_bool[i] = compare;
    }
    reg_val[static_cast<size_t>(ins.dst)] = static_cast<int>(i);
  }
  for (const auto& s : st.stores) {
    const int v = reg_val[static_cast<size_t>(s.reg)];
    // a bool (a comparison's, or one loaded; its lanes hold 0 or 1) only into bools
    if (v < 0 || st.program[static_cast<size_t>(v)].dtype != s.dst.dtype) return nullptr;
    last_use[static_cast<size_t>(v)] = static_cast<int64_t>(n);
    plan.store_val.push_back(v);
  }
  // Pointers: one per place read (lowering may list it twice), then one per store.
  auto pointer_of = [&](const View& v, bool shared) {
    JitKernel::Pointer p{v.storage, v.offset, strides_of(v),
                         static_cast<int64_t>(itemsize(v.dtype))};
    for (size_t i = 0; shared && i < k->pointers.size(); ++i) {
      const JitKernel::Pointer& q = k->pointers[i];
      if (q.storage == p.storage && q.offset == p.offset && q.strides == p.strides &&
          q.size == p.size)
        return static_cast<int>(i);
    }
    k->pointers.push_back(std::move(p));
    return static_cast<int>(k->pointers.size() - 1);
  };
  for (size_t i = 0; i < n; ++i)
    if (plan.load[i] == Load::Vector || plan.load[i] == Load::Bool || plan.load[i] == Load::Row)
      plan.ptr_of[i] = pointer_of(st.loads[static_cast<size_t>(st.program[i].load)], true);
  k->n_in = k->pointers.size();
  for (const auto& s : st.stores) plan.store_ptr.push_back(pointer_of(s.dst, false));
  plan.n_ptr = static_cast<int>(k->pointers.size());
  if (plan.n_ptr > kMaxPointers) return nullptr;
  // Registers: a row value's for the whole kernel, and a single value's where the ISA
  // keeps them in registers (else it is read from consts); the others from their
  // instruction to their last reader.
  constexpr int kValueRegs = Isa::kValueRegs;
  std::vector<char> free_reg(kValueRegs, 1), kept(n, 0);
  auto take = [&]() {
    for (int r = 0; r < kValueRegs; ++r)
      if (free_reg[static_cast<size_t>(r)]) {
        free_reg[static_cast<size_t>(r)] = 0;
        return r;
      }
    return -1;
  };
  for (size_t i = 0; i < n; ++i) {
    if (plan.load[i] != Load::Single && plan.load[i] != Load::Row) continue;
    kept[i] = 1;
    if (plan.load[i] == Load::Single) {
      plan.const_of[i] = static_cast<int>(k->single_loads.size());
      k->single_loads.push_back(st.program[i].load);
      if (!Isa::kSinglesInRegs) continue;
    }
    plan.reg_of[i] = take();
    if (plan.reg_of[i] < 0) return nullptr;
    if (plan.load[i] == Load::Row)
      plan.rows.push_back({plan.reg_of[i], plan.ptr_of[i], is_bool[i] != 0,
                           st.program[i].dtype == DType::bfloat16});
  }
  for (int j = 0; j < 3; ++j)
    for (size_t i = 0; i < n; ++i)
      if (!kept[i]) plan.srcs[j][i] = src_val[j][i];
  // one vector's registers among the free ones (kept values keep theirs), each value's from
  // its instruction to its last reader; `loads_in_memory`: float loads get none
  auto allocate = [&](bool loads_in_memory) -> std::optional<std::vector<int>> {
    std::vector<int> regs(n, -1);
    for (size_t i = 0; i < n; ++i) {
      if (kept[i]) {
        regs[i] = plan.reg_of[i];
        continue;
      }
      for (int j = 0; j < 3; ++j) {  // operands read for the last time free their registers
        const int v = plan.srcs[j][i];
        if (v >= 0 && last_use[static_cast<size_t>(v)] == static_cast<int64_t>(i) &&
            !kept[static_cast<size_t>(v)] && regs[static_cast<size_t>(v)] >= 0)
          free_reg[static_cast<size_t>(regs[static_cast<size_t>(v)])] = 1;
      }
      if (loads_in_memory && plan.load[i] == Load::Vector) continue;
      regs[i] = take();
      if (regs[i] < 0) return std::nullopt;
      if (last_use[i] < 0) free_reg[static_cast<size_t>(regs[i])] = 1;  // read by no one
    }
    return regs;
  };
  std::optional<std::vector<int>> first = allocate(false);
  if (!first) return nullptr;
  plan.reg_of = std::move(*first);
  std::vector<char> used(kValueRegs, 0);  // by kept values, the first vector's, and pins
  for (size_t i = 0; i < n; ++i)
    if (plan.reg_of[i] >= 0) used[static_cast<size_t>(plan.reg_of[i])] = 1;
  if (options.pin_constants && Isa::kSinglesInRegs) {  // the ops' constants, in the
                                                       // registers the values leave
    for (size_t i = 0; i < n; ++i)
      for (float v : Gen<Isa>::constants_of(st.program[i].op)) {
        const uint32_t b = bits_of(v);
        if (std::ranges::any_of(plan.pinned, [&](const auto& p) { return p.first == b; })) continue;
        int r = kValueRegs - 1;
        while (r >= 0 && used[static_cast<size_t>(r)]) --r;
        if (r < 0) break;
        used[static_cast<size_t>(r)] = 1;
        plan.pinned.emplace_back(b, r);
      }
  }
  if (options.interleave) {  // the registers of each vector, while they last, and no more
                             // vectors than a row (or a tile of one) holds
    const int64_t most = std::min<int64_t>(
        kMaxVectors, std::min<int64_t>(lay.shape.back(), kTileFloats) / Isa::kLanes);
    // AVX-512: the first vector is the one-vector loop's, the others in the registers it
    // leaves; AVX2: every vector afresh, its loads read in place, beside the kept values
    std::vector<char> taken = used;
    if (Isa::kLoadsInPlace) {
      for (size_t i = 0; i < n; ++i)
        if (!kept[i] && plan.reg_of[i] >= 0) taken[static_cast<size_t>(plan.reg_of[i])] = 0;
    } else {
      plan.reg_of_vectors.push_back(plan.reg_of);
    }
    while (static_cast<int64_t>(plan.reg_of_vectors.size()) < most) {
      for (int r = 0; r < kValueRegs; ++r)
        free_reg[static_cast<size_t>(r)] = !taken[static_cast<size_t>(r)];
      std::optional<std::vector<int>> regs = allocate(Isa::kLoadsInPlace);
      if (!regs) break;
      for (int r : *regs)
        if (r >= 0) taken[static_cast<size_t>(r)] = 1;
      plan.reg_of_vectors.push_back(std::move(*regs));
    }
  }
  // the ops spared their clamps by literal values; the others may be by the single values
  // of a run where, with those values 1, their operand is bounded (not where memory's values
  // reach it)
  // (value_ranges knows float32's arithmetic, not bfloat16's roundings)
  if (options.ranges && !any_bf16) {
    std::vector<std::optional<double>> known(st.loads.size()), ones(st.loads.size());
    for (size_t l = 0; l < st.loads.size(); ++l) {
      const View& v = st.loads[l];
      if (v.is_scalar() && v.scalar_slot < 0)
        known[l] = ones[l] = static_cast<float>(v.value);
      else if (v.is_single_value())
        ones[l] = 1.0;
    }
    plan.ranged = spared_ops(st, plan.srcs[0], value_ranges(st, known));
    const std::vector<Interval> r1 = value_ranges(st, ones);
    const bool unknown = known != ones;
    for (size_t i = 0; i < n; ++i) {
      k->spares_clamps = k->spares_clamps || plan.ranged[i];
      if (!has_clamps(st.program[i].op) || plan.ranged[i] || !unknown) continue;
      const Interval x = r1[static_cast<size_t>(plan.srcs[0][i])];
      k->check_ranges = k->check_ranges || (std::isfinite(x.lo) && std::isfinite(x.hi));
    }
  }
  try {
    k->copies = Gen<Isa>::kCopies;
    k->code =
        code_for<Isa>(plan, static_cast<int>(k->single_loads.size()), st.shape, options.shared);
  } catch (const Xbyak::Error&) {
    return nullptr;
  }
  if (k->check_ranges) {
    k->plan = std::move(plan);
    k->plan.step = nullptr;  // the step run, each time
    k->make = &code_for<Isa>;
    k->shared = options.shared;
  }
  return k;
}

// The code for this run's single values `values` (pass jit_ranges): where they keep an op's
// operand in the range it needs no clamps for, code without them, made once per set of such
// ops (at most kRangedCodes sets), else the kernel's own; `ranged`: whether it is such code.
std::shared_ptr<const JitCode> code_for_values(const JitKernel& k, const FusedStep& st,
                                               const std::vector<float>& values, bool& ranged) {
  constexpr size_t kRangedCodes = 4;
  std::vector<std::optional<double>> known(st.loads.size());
  for (size_t i = 0; i < k.single_loads.size(); ++i)
    known[static_cast<size_t>(k.single_loads[i])] = values[i];
  // the literal values the kernel's own code was made for are among the run's
  const std::vector<char> spared = spared_ops(st, k.plan.srcs[0], value_ranges(st, known));
  ranged = spared != k.plan.ranged;
  if (!ranged) return k.code;
  const std::lock_guard<std::mutex> lock(k.mu);
  for (const auto& [ops, code] : k.codes)
    if (ops == spared) return code;
  ranged = false;
  if (k.codes.size() >= kRangedCodes) return k.code;
  Plan plan = k.plan;
  plan.step = &st;
  plan.ranged = spared;
  try {
    k.codes.emplace_back(spared, k.make(plan, static_cast<int>(values.size()), st.shape, k.shared));
  } catch (const Xbyak::Error&) {
    return k.code;
  }
  ranged = true;
  return k.codes.back().second;
}

}  // namespace

int jit_vectors(const JitKernel& k) {
  return k.code->vectors;
}

int jit_constants(const JitKernel& k) {
  return k.code->constants;
}

const char* jit_ranges_note(const JitKernel& k) {
  return k.spares_clamps  ? "; clamps left out"
         : k.check_ranges ? "; clamps checked at each run"
                          : "";
}

bool run_jit(const FusedStep& st, const RunContext& ctx, bool stream) {
  const JitKernel& k = *st.jit;
  const size_t n_ptr = k.pointers.size(), dims = k.shape.size();
  const char* base[kMaxPointers];
  const char* last[kMaxPointers];  // one past the last byte each touches
  for (size_t i = 0; i < n_ptr; ++i) {
    const JitKernel::Pointer& p = k.pointers[i];
    base[i] = ctx.base[static_cast<size_t>(p.storage)] + p.offset * p.size;
    int64_t reach = 1;
    for (size_t d = 0; d < dims; ++d) reach += (k.shape[d] - 1) * p.strides[d];
    last[i] = base[i] + reach * p.size;
  }
  // an output over an input at another place: the interpreter's tiles read before they write
  for (size_t o = k.n_in; o < n_ptr; ++o)
    for (size_t i = 0; i < k.n_in; ++i)
      if (base[o] < last[i] && base[i] < last[o] &&
          (base[o] != base[i] || k.pointers[o].strides != k.pointers[i].strides ||
           k.pointers[o].size != k.pointers[i].size))
        return false;
  thread_local std::vector<float> values, consts;
  values.resize(k.single_loads.size());
  for (size_t i = 0; i < k.single_loads.size(); ++i) {
    const View& v = st.loads[static_cast<size_t>(k.single_loads[i])];
    if (v.dtype == DType::bfloat16)  // a constant rounded, as the interpreter rounds it
      values[i] = v.is_scalar() ? static_cast<float>(BFloat16(static_cast<float>(ctx.scalar(v).f)))
                                : static_cast<float>(reinterpret_cast<const BFloat16*>(
                                      ctx.base[v.storage])[v.offset]);
    else
      values[i] = v.is_scalar() ? static_cast<float>(ctx.scalar(v).f)
                                : reinterpret_cast<const float*>(ctx.base[v.storage])[v.offset];
  }
  bool for_values = false;
  const std::shared_ptr<const JitCode> chosen =
      k.check_ranges ? code_for_values(k, st, values, for_values) : nullptr;
  const JitCode& code = chosen ? *chosen : *k.code;
  if (for_values || k.spares_clamps) metrics::jit_ranged_runs.add();
  const size_t singles = values.size() * static_cast<size_t>(k.copies);
  consts.resize(singles + code.pool.size());
  for (size_t i = 0; i < values.size(); ++i)
    std::fill_n(consts.begin() + static_cast<ptrdiff_t>(i) * k.copies, k.copies, values[i]);
  std::memcpy(consts.data() + singles, code.pool.data(), code.pool.size() * 4);
  const float* c = consts.data();
  // rows of `width` (the last dim), `block` of them (the dim before) a stride apart
  const int64_t width = k.shape[dims - 1], block = dims > 1 ? k.shape[dims - 2] : 1;
  const int64_t rows = st.shape.numel() / width;
  // rows [row, row + count) of one block, each over [begin, end)
  auto run = [&](int64_t row, int64_t count, int64_t begin, int64_t end) {
    Args a;
    bool aligned = true;
    for (size_t i = 0; i < n_ptr; ++i) {
      const JitKernel::Pointer& p = k.pointers[i];
      int64_t offset = 0;
      for (int64_t d = static_cast<int64_t>(dims) - 2, r = row; d >= 0; --d) {
        const size_t du = static_cast<size_t>(d);
        offset += r % k.shape[du] * p.strides[du];
        r /= k.shape[du];
      }
      a.ptr[i] = base[i] + offset * p.size;
      a.row_step[i] = dims > 1 ? p.strides[dims - 2] * p.size : 0;
      if (i >= k.n_in && p.size == 4)  // a float32 result, which fn_stream streams
        aligned = aligned && reinterpret_cast<uintptr_t>(a.ptr[i] + begin * p.size) % 64 == 0 &&
                  (count == 1 || a.row_step[i] % 64 == 0);
    }
    a.consts = c;
    a.rows = count;
    a.begin = begin;
    a.end = end;
    (stream && code.fn_stream != nullptr && aligned ? code.fn_stream : code.fn)(&a);
  };
  if (width >= kTileFloats) {  // tiles of long rows
    const int64_t per_row = (width + kTileFloats - 1) / kTileFloats;
    runtime::parallel_for(rows * per_row, 4, [&](int64_t u0, int64_t u1) {
      while (u0 < u1) {
        const int64_t row = u0 / per_row, t0 = u0 % per_row;
        const int64_t t1 = std::min(per_row, t0 + (u1 - u0));
        run(row, 1, t0 * kTileFloats, std::min(width, t1 * kTileFloats));
        u0 += t1 - t0;
      }
    });
  } else {  // short rows, as many to a task as make a tile
    const int64_t per_task = (kTileFloats + width - 1) / width;
    runtime::parallel_for((rows + per_task - 1) / per_task, 4, [&](int64_t u0, int64_t u1) {
      for (int64_t r = u0 * per_task, r1 = std::min(rows, u1 * per_task); r < r1;) {
        const int64_t count = std::min(r1 - r, block - r % block);
        run(r, count, 0, width);
        r += count;
      }
    });
  }
  metrics::jit_fused_runs.add();
  return true;
}

#else  // no Xbyak: every fused step is interpreted

class JitKernel {};

bool jit_available() {
  return false;
}

std::shared_ptr<const JitKernel> compile_jit(const FusedStep&, const JitOptions&) {
  return nullptr;
}

bool run_jit(const FusedStep&, const RunContext&, bool) {
  return false;
}

int jit_vectors(const JitKernel&) {
  return 1;
}

int jit_constants(const JitKernel&) {
  return 0;
}

const char* jit_ranges_note(const JitKernel&) {
  return "";
}

#endif

}  // namespace lazytrace::cpu
