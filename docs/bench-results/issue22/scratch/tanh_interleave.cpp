// The native code's tanh (jit_elementwise.cpp's tanh(), AVX-512, not ranged) over a tile in
// L1, K vectors a pass, emitted two ways: op by op (each vector's whole tanh, then the next
// one's, through shared scratch registers: what the library does) and instruction by
// instruction (each instruction for the K vectors, each vector with scratch of its own).
// Cycles per 16 floats (argv[1]: the clock in GHz), and that both give the same bits.
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "xbyak_tile.h"

using namespace Xbyak;

namespace {

constexpr float kP[] = {0.0013814551057294011f, 0.00836869329214096f, 0.04166838526725769f,
                        0.1666652113199234f, 0.4999999403953552f};

struct Regs {  // one vector's registers: x, d, scratch t[0..7], its mask k
  int x, d, t[8], k;
};

struct Gen : tile::PoolGen {
  bool pinned = false;   // constants that need a register in pinned zmm28..31, not broadcasts
  bool ternlog = false;  // e - 1 with x's sign flipped by one vpternlogd, not 1 - e, and, or
  // a constant into register d: a broadcast, or a move from its pinned register
  void load_const(int d, float f, int pin) {
    if (pinned)
      vmovaps(Zmm(d), Zmm(28 + pin));
    else
      vbroadcastss(Zmm(d), cs(f));
  }

  // tanh's instructions, one function each, for a vector's registers
  std::vector<std::function<void(const Regs&)>> tanh_seq() {
    std::vector<std::function<void(const Regs&)>> s;
    auto Z = [](int i) { return Zmm(i); };
    // ax=t0 e=t1 fn=t2 den=t3 s=t4 z=t5 (exp: r=t5 p=t6 rr=t7)
    s.push_back([=, this](const Regs& r) { vpandd(Z(r.t[0]), Z(r.x), cb(0x7fffffffu)); });
    s.push_back([=, this](const Regs& r) { vaddps(Z(r.t[1]), Z(r.t[0]), Z(r.t[0])); });
    s.push_back([=, this](const Regs& r) { vminps(Z(r.t[1]), Z(r.t[1]), c(20.0f)); });
    s.push_back(
        [=, this](const Regs& r) { vmulps(Z(r.t[2]), Z(r.t[1]), c(1.44269504088896341f)); });
    s.push_back([=, this](const Regs& r) { vrndscaleps(Z(r.t[2]), Z(r.t[2]), 0x08); });
    s.push_back([=, this](const Regs& r) { vmovaps(Z(r.t[5]), Z(r.t[1])); });
    s.push_back([=, this](const Regs& r) { vfmadd231ps(Z(r.t[5]), Z(r.t[2]), c(-0.693147182f)); });
    s.push_back([=, this](const Regs& r) { load_const(r.t[6], kP[0], 0); });
    for (int i = 1; i < 5; ++i)
      s.push_back([=, this](const Regs& r) { vfmadd213ps(Z(r.t[6]), Z(r.t[5]), c(kP[i])); });
    s.push_back([=, this](const Regs& r) { vmulps(Z(r.t[7]), Z(r.t[5]), Z(r.t[5])); });
    s.push_back([=, this](const Regs& r) { vfmadd213ps(Z(r.t[6]), Z(r.t[7]), Z(r.t[5])); });
    s.push_back([=, this](const Regs& r) { vaddps(Z(r.t[6]), Z(r.t[6]), c(1.0f)); });
    s.push_back([=, this](const Regs& r) { vscalefps(Z(r.t[3]), Z(r.t[6]), Z(r.t[2])); });
    s.push_back([=, this](const Regs& r) { vaddps(Z(r.t[3]), Z(r.t[3]), c(1.0f)); });
    s.push_back([=, this](const Regs& r) { load_const(r.t[1], 2.0f, 1); });
    s.push_back([=, this](const Regs& r) { vdivps(Z(r.t[1]), Z(r.t[1]), Z(r.t[3])); });
    if (ternlog) {
      s.push_back([=, this](const Regs& r) { vsubps(Z(r.d), Z(r.t[1]), c(1.0f)); });
      // d ^ (~x & sign): A ^ (~B & C), table 0xd2 for A = 0xf0, B = 0xcc, C = 0xaa
      s.push_back([=, this](const Regs& r) { vpternlogd(Z(r.d), Z(r.x), cb(0x80000000u), 0xd2); });
    } else {
      s.push_back([=, this](const Regs& r) { load_const(r.d, 1.0f, 2); });
      s.push_back([=, this](const Regs& r) { vsubps(Z(r.d), Z(r.d), Z(r.t[1])); });
      s.push_back([=, this](const Regs& r) { vpandd(Z(r.t[2]), Z(r.x), cb(0x80000000u)); });
      s.push_back([=, this](const Regs& r) { vpord(Z(r.d), Z(r.d), Z(r.t[2])); });
    }
    s.push_back([=, this](const Regs& r) { vmulps(Z(r.t[5]), Z(r.x), Z(r.x)); });
    s.push_back([=, this](const Regs& r) { load_const(r.t[4], -5.70498872745e-3f, 3); });
    for (float k : {2.06390887954e-2f, -5.37397155531e-2f, 1.33314422036e-1f, -3.33332819422e-1f})
      s.push_back([=, this](const Regs& r) { vfmadd213ps(Z(r.t[4]), Z(r.t[5]), c(k)); });
    s.push_back([=, this](const Regs& r) { vmulps(Z(r.t[4]), Z(r.t[4]), Z(r.t[5])); });
    s.push_back([=, this](const Regs& r) { vfmadd213ps(Z(r.t[4]), Z(r.x), Z(r.x)); });
    s.push_back([=, this](const Regs& r) { vcmpps(Opmask(r.k), Z(r.t[0]), c(0.625f), 0x19); });
    s.push_back([=, this](const Regs& r) { vmovaps(Z(r.d) | Opmask(r.k), Z(r.t[4])); });
    return s;
  }

  Gen(int k, bool by_instruction, bool pin, bool tern) : pinned(pin), ternlog(tern) {
    begin();
    if (pinned) {
      const float k4[] = {kP[0], 2.0f, 1.0f, -5.70498872745e-3f};
      for (int i = 0; i < 4; ++i) vbroadcastss(Zmm(28 + i), cs(k4[i]));
    }
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
    end(loop, k);
  }
};

}  // namespace

int main(int argc, char** argv) {
  const double ghz = argc > 1 ? std::stod(argv[1]) : 3.58;
  const std::vector<float> x = tile::input(16 * 48);  // 16 floats times 1, 2, 3, 4, 8 vectors
  std::vector<uint32_t> ref, out;
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
    const double cycles = tile::cycles(g, x, out, ghz);
    if (ref.empty()) ref = out;
    std::printf("tanh, %d vector(s) %-15s%-9s%-9s %6.2f cycles per 16 floats%s\n", cf.k,
                cf.by_instr ? "by instruction" : "op by op", cf.pinned ? " pinned" : "",
                cf.ternlog ? " ternlog" : "", cycles, out == ref ? "" : "  DIFFERENT BITS");
  }
}
