// The native code's tanh (jit_elementwise.cpp's tanh(), AVX-512, not ranged) over a tile in
// L1, K vectors a pass, emitted two ways: op by op (each vector's whole tanh, then the next
// one's, through shared scratch registers: what the library does) and instruction by
// instruction (each instruction for the K vectors, each vector with scratch of its own).
// Cycles per 16 floats (argv[1]: the clock in GHz), and that both give the same bits.
#include <xbyak/xbyak.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace Xbyak;

namespace {

constexpr float kP[] = {0.0013814551057294011f, 0.00836869329214096f, 0.04166838526725769f,
                        0.1666652113199234f, 0.4999999403953552f};

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

struct Regs {  // one vector's registers: x, d, scratch t[0..7], its mask k
  int x, d, t[8], k;
};

struct Gen : CodeGenerator {
  std::vector<uint32_t> pool;
  bool pinned = false;  // constants that need a register in pinned zmm28..31, not broadcasts
  bool ternlog = false;  // e - 1 with x's sign flipped by one vpternlogd, not 1 - e, and, or
  // a constant into register d: a broadcast, or a move from its pinned register
  void load_const(int d, float f, int pin) {
    if (pinned)
      vmovaps(Zmm(d), Zmm(28 + pin));
    else
      vbroadcastss(Zmm(d), cs(f));
  }
  Address c(uint32_t b) {
    size_t i = 0;
    while (i < pool.size() && pool[i] != b) ++i;
    if (i == pool.size()) pool.push_back(b);
    return ptr_b[rdx + 4 * static_cast<int>(i)];
  }
  Address cf(float f) { return c(bits(f)); }
  Address cs(float f) {
    c(bits(f));
    size_t i = 0;
    while (pool[i] != bits(f)) ++i;
    return ptr[rdx + 4 * static_cast<int>(i)];
  }

  // tanh's instructions, one function each, for a vector's registers
  std::vector<std::function<void(const Regs&)>> tanh_seq() {
    std::vector<std::function<void(const Regs&)>> s;
    auto Z = [](int i) { return Zmm(i); };
    // ax=t0 e=t1 fn=t2 den=t3 s=t4 z=t5 (exp: r=t5 p=t6 rr=t7)
    s.push_back([=, this](const Regs& r) { vpandd(Z(r.t[0]), Z(r.x), c(0x7fffffffu)); });
    s.push_back([=, this](const Regs& r) { vaddps(Z(r.t[1]), Z(r.t[0]), Z(r.t[0])); });
    s.push_back([=, this](const Regs& r) { vminps(Z(r.t[1]), Z(r.t[1]), cf(20.0f)); });
    s.push_back(
        [=, this](const Regs& r) { vmulps(Z(r.t[2]), Z(r.t[1]), cf(1.44269504088896341f)); });
    s.push_back([=, this](const Regs& r) { vrndscaleps(Z(r.t[2]), Z(r.t[2]), 0x08); });
    s.push_back([=, this](const Regs& r) { vmovaps(Z(r.t[5]), Z(r.t[1])); });
    s.push_back(
        [=, this](const Regs& r) { vfmadd231ps(Z(r.t[5]), Z(r.t[2]), cf(-0.693147182f)); });
    s.push_back([=, this](const Regs& r) { load_const(r.t[6], kP[0], 0); });
    for (int i = 1; i < 5; ++i)
      s.push_back([=, this](const Regs& r) { vfmadd213ps(Z(r.t[6]), Z(r.t[5]), cf(kP[i])); });
    s.push_back([=, this](const Regs& r) { vmulps(Z(r.t[7]), Z(r.t[5]), Z(r.t[5])); });
    s.push_back([=, this](const Regs& r) { vfmadd213ps(Z(r.t[6]), Z(r.t[7]), Z(r.t[5])); });
    s.push_back([=, this](const Regs& r) { vaddps(Z(r.t[6]), Z(r.t[6]), cf(1.0f)); });
    s.push_back([=, this](const Regs& r) { vscalefps(Z(r.t[3]), Z(r.t[6]), Z(r.t[2])); });
    s.push_back([=, this](const Regs& r) { vaddps(Z(r.t[3]), Z(r.t[3]), cf(1.0f)); });
    s.push_back([=, this](const Regs& r) { load_const(r.t[1], 2.0f, 1); });
    s.push_back([=, this](const Regs& r) { vdivps(Z(r.t[1]), Z(r.t[1]), Z(r.t[3])); });
    if (ternlog) {
      s.push_back([=, this](const Regs& r) { vsubps(Z(r.d), Z(r.t[1]), cf(1.0f)); });
      // d ^ (~x & sign): A ^ (~B & C), table 0xd2 for A = 0xf0, B = 0xcc, C = 0xaa
      s.push_back(
          [=, this](const Regs& r) { vpternlogd(Z(r.d), Z(r.x), c(0x80000000u), 0xd2); });
    } else {
      s.push_back([=, this](const Regs& r) { load_const(r.d, 1.0f, 2); });
      s.push_back([=, this](const Regs& r) { vsubps(Z(r.d), Z(r.d), Z(r.t[1])); });
      s.push_back([=, this](const Regs& r) { vpandd(Z(r.t[2]), Z(r.x), c(0x80000000u)); });
      s.push_back([=, this](const Regs& r) { vpord(Z(r.d), Z(r.d), Z(r.t[2])); });
    }
    s.push_back([=, this](const Regs& r) { vmulps(Z(r.t[5]), Z(r.x), Z(r.x)); });
    s.push_back([=, this](const Regs& r) { load_const(r.t[4], -5.70498872745e-3f, 3); });
    for (float k : {2.06390887954e-2f, -5.37397155531e-2f, 1.33314422036e-1f, -3.33332819422e-1f})
      s.push_back([=, this](const Regs& r) { vfmadd213ps(Z(r.t[4]), Z(r.t[5]), cf(k)); });
    s.push_back([=, this](const Regs& r) { vmulps(Z(r.t[4]), Z(r.t[4]), Z(r.t[5])); });
    s.push_back([=, this](const Regs& r) { vfmadd213ps(Z(r.t[4]), Z(r.x), Z(r.x)); });
    s.push_back([=, this](const Regs& r) { vcmpps(Opmask(r.k), Z(r.t[0]), cf(0.625f), 0x19); });
    s.push_back([=, this](const Regs& r) { vmovaps(Z(r.d) | Opmask(r.k), Z(r.t[4])); });
    return s;
  }

  // void f(const float* x, float* y, int64_t n, const uint32_t* consts): rdi, rsi, rdx(n),
  // rcx(consts) -> consts moved to rdx after n to r8
  Gen(int k, bool by_instruction, bool pin, bool tern)
      : CodeGenerator(1 << 16), pinned(pin), ternlog(tern) {
    mov(r8, rdx);
    mov(rdx, rcx);
    if (pinned) {
      const float k4[] = {kP[0], 2.0f, 1.0f, -5.70498872745e-3f};
      for (int i = 0; i < 4; ++i) vbroadcastss(Zmm(28 + i), cs(k4[i]));
    }
    xor_(r10, r10);
    std::vector<Regs> regs(static_cast<size_t>(k));
    for (int j = 0; j < k; ++j) {
      Regs& r = regs[static_cast<size_t>(j)];
      if (by_instruction) {  // 10 registers a vector
        r.x = 10 * j;
        r.d = 10 * j + 1;
        for (int i = 0; i < 8; ++i) r.t[i] = 10 * j + 2 + i;
      } else {  // shared scratch zmm24..31
        r.x = 2 * j;
        r.d = 2 * j + 1;
        for (int i = 0; i < 8; ++i) r.t[i] = (pinned ? 20 : 24) + i;
      }
      r.k = by_instruction ? 2 + j : 2;
    }
    const auto seq = tanh_seq();
    Label loop;
    L(loop);
    for (int j = 0; j < k; ++j) vmovups(Zmm(regs[j].x), ptr[rdi + r10 * 4 + 64 * j]);
    if (by_instruction) {
      for (const auto& f : seq)
        for (int j = 0; j < k; ++j) f(regs[j]);
    } else {
      for (int j = 0; j < k; ++j)
        for (const auto& f : seq) f(regs[j]);
    }
    for (int j = 0; j < k; ++j) vmovups(ptr[rsi + r10 * 4 + 64 * j], Zmm(regs[j].d));
    add(r10, 16 * k);
    cmp(r10, r8);
    jl(loop);
    vzeroupper();
    ret();
  }
};

}  // namespace

int main(int argc, char** argv) {
  const double ghz = argc > 1 ? std::stod(argv[1]) : 3.58;
  const int64_t n = 16 * 48;  // a multiple of 16 * 1, 2, 3, 4, 8 vectors, in L1
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::ldexp(std::sin(i * 0.37) * 3, (i % 7) - 3);
  std::vector<uint32_t> ref;
  struct Config {
    int k;
    bool by_instr, pinned, ternlog;
  };
  const Config configs[] = {
      {1, false, false, false}, {8, false, false, false}, {2, true, false, false},
      {3, true, false, false},  {8, false, true, false},  {8, false, false, true},
      {8, false, true, true},   {2, true, true, false},   {3, true, false, true},
      {2, true, true, true},
  };
  for (const Config& cf : configs) {
    Gen g(cf.k, cf.by_instr, cf.pinned, cf.ternlog);
    g.ready();
    const std::vector<uint32_t> pool = g.pool;
    auto f = g.getCode<void (*)(const float*, float*, int64_t, const uint32_t*)>();
    f(x.data(), y.data(), n, pool.data());
    std::vector<uint32_t> out(n);
    std::memcpy(out.data(), y.data(), n * 4);
    if (ref.empty()) ref = out;
    double best = 1e30;
    for (int rep = 0; rep < 20; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (int it = 0; it < 4000; ++it) f(x.data(), y.data(), n, pool.data());
      best = std::min(
          best,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 4000);
    }
    std::printf("tanh, %d vector(s) %-15s%-9s%-9s %6.2f cycles per 16 floats%s\n", cf.k,
                cf.by_instr ? "by instruction" : "op by op", cf.pinned ? " pinned" : "",
                cf.ternlog ? " ternlog" : "", best * ghz * 1e9 / (n / 16.0),
                out == ref ? "" : "  DIFFERENT BITS");
  }
}
