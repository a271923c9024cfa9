// kernels_bench's chain with tanh and sigmoid (relu(sigmoid(2 tanh(1.5 x + 0.25) - 0.5) x)),
// the native code's instructions (jit_elementwise.cpp at b383506: the ops' constants in
// registers, sigmoid without its clamps as jit_ranges leaves it), over a tile in L1, V vectors
// a pass, emitted op by op (each op for every vector, the library's order) and with the
// vectors in lockstep groups of G (each instruction of an op for the G vectors of a group,
// each with scratch registers of its own). Cycles per 16 floats (argv[1]: the clock in GHz);
// every variant's bits against math.h's scalar chain (build with -ffp-contract=off -Isrc
// -Iinclude).
#include <xbyak/xbyak.h>

#include "backends/cpu/math.h"

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

using namespace Xbyak;

namespace {

constexpr float kP[] = {0.0013814551057294011f, 0.00836869329214096f, 0.04166838526725769f,
                        0.1666652113199234f, 0.4999999403953552f};
constexpr float kT[] = {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f,
                        1.33314422036e-1f, -3.33332819422e-1f};

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

struct Regs {  // one vector's: x, its running value v, scratch t[0..7], mask k
  int x, v, t[8], k;
};
using Seq = std::vector<std::function<void(const Regs&)>>;

// registers kept for the whole loop: the ops' constants and the step's single values
enum Pin { kP0, kTwo, kT0, kOne, kA, kB, kMinusHalf, kPins };
constexpr float kPinValue[kPins] = {kP[0], 2.0f, kT[0], 1.0f, 1.5f, 0.25f, -0.5f};

struct Gen : CodeGenerator {
  std::vector<uint32_t> pool;
  Address c(float f) {
    const uint32_t b = bits(f);
    size_t i = 0;
    while (i < pool.size() && pool[i] != b) ++i;
    if (i == pool.size()) pool.push_back(b);
    return ptr_b[rdx + 4 * static_cast<int>(i)];
  }
  Address cs(float f) {
    c(f);
    size_t i = 0;
    while (pool[i] != bits(f)) ++i;
    return ptr[rdx + 4 * static_cast<int>(i)];
  }
  bool pins = true;  // else the single values as broadcast memory operands, the ops'
                     // constants broadcast at each use
  static Zmm P(Pin p) { return Zmm(31 - p); }
  // d = a op b for a pinned value b: its register, or a broadcast from memory
  template <typename F>
  void with(Pin p, F f) {
    if (pins)
      f(P(p));
    else
      f(c(kPinValue[p]));
  }
  // a pinned value into register d
  void load(const Zmm& d, Pin p) {
    if (pins)
      vmovaps(d, P(p));
    else
      vbroadcastss(d, cs(kPinValue[p]));
  }
  static Zmm Z(int i) { return Zmm(i); }

  // the chain's ops, each a list of instructions
  std::vector<Seq> ops() {
    std::vector<Seq> out;
    Seq s;
    // v = x * 1.5, + 0.25
    s.push_back([this](const Regs& r) { with(kA, [&](const auto& o) { vmulps(Z(r.v), Z(r.x), o); }); });
    out.push_back(std::move(s));
    s.clear();
    s.push_back([this](const Regs& r) { with(kB, [&](const auto& o) { vaddps(Z(r.v), Z(r.v), o); }); });
    out.push_back(std::move(s));
    s.clear();
    // tanh(v) into v: ax=t0 e=t1 fn=t2 den=t3 s=t4 z=t5 (exp: r=t5 p=t6 rr=t7)
    s.push_back([this](const Regs& r) { vpandd(Z(r.t[0]), Z(r.v), c(std::bit_cast<float>(0x7fffffffu))); });
    s.push_back([this](const Regs& r) { vaddps(Z(r.t[1]), Z(r.t[0]), Z(r.t[0])); });
    s.push_back([this](const Regs& r) { vminps(Z(r.t[1]), Z(r.t[1]), c(20.0f)); });
    s.push_back([this](const Regs& r) { vmulps(Z(r.t[2]), Z(r.t[1]), c(1.44269504088896341f)); });
    s.push_back([this](const Regs& r) { vrndscaleps(Z(r.t[2]), Z(r.t[2]), 0x08); });
    s.push_back([this](const Regs& r) { vmovaps(Z(r.t[5]), Z(r.t[1])); });
    s.push_back([this](const Regs& r) { vfmadd231ps(Z(r.t[5]), Z(r.t[2]), c(-0.693147182f)); });
    s.push_back([this](const Regs& r) { load(Z(r.t[6]), kP0); });
    for (int i = 1; i < 5; ++i)
      s.push_back([this, i](const Regs& r) { vfmadd213ps(Z(r.t[6]), Z(r.t[5]), c(kP[i])); });
    s.push_back([this](const Regs& r) { vmulps(Z(r.t[7]), Z(r.t[5]), Z(r.t[5])); });
    s.push_back([this](const Regs& r) { vfmadd213ps(Z(r.t[6]), Z(r.t[7]), Z(r.t[5])); });
    s.push_back([this](const Regs& r) { vaddps(Z(r.t[6]), Z(r.t[6]), c(1.0f)); });
    s.push_back([this](const Regs& r) { vscalefps(Z(r.t[3]), Z(r.t[6]), Z(r.t[2])); });
    s.push_back([this](const Regs& r) { vaddps(Z(r.t[3]), Z(r.t[3]), c(1.0f)); });
    s.push_back([this](const Regs& r) { load(Z(r.t[1]), kTwo); });
    s.push_back([this](const Regs& r) { vdivps(Z(r.t[1]), Z(r.t[1]), Z(r.t[3])); });
    s.push_back([this](const Regs& r) { vsubps(Z(r.t[4]), Z(r.t[1]), c(1.0f)); });
    s.push_back([this](const Regs& r) {
      vpternlogd(Z(r.t[4]), Z(r.v), c(std::bit_cast<float>(0x80000000u)), 0xd2);
    });
    s.push_back([this](const Regs& r) { vmulps(Z(r.t[5]), Z(r.v), Z(r.v)); });
    s.push_back([this](const Regs& r) { load(Z(r.t[1]), kT0); });
    for (int i = 1; i < 5; ++i)
      s.push_back([this, i](const Regs& r) { vfmadd213ps(Z(r.t[1]), Z(r.t[5]), c(kT[i])); });
    s.push_back([this](const Regs& r) { vmulps(Z(r.t[1]), Z(r.t[1]), Z(r.t[5])); });
    s.push_back([this](const Regs& r) { vfmadd213ps(Z(r.t[1]), Z(r.v), Z(r.v)); });
    s.push_back([this](const Regs& r) { vcmpps(Opmask(r.k), Z(r.t[0]), c(0.625f), 0x19); });
    s.push_back([this](const Regs& r) { vmovaps(Z(r.t[4]) | Opmask(r.k), Z(r.t[1])); });
    s.push_back([this](const Regs& r) { vmovaps(Z(r.v), Z(r.t[4])); });
    out.push_back(std::move(s));
    s.clear();
    // v = v * 2, + -0.5
    s.push_back([this](const Regs& r) { with(kTwo, [&](const auto& o) { vmulps(Z(r.v), Z(r.v), o); }); });
    out.push_back(std::move(s));
    s.clear();
    s.push_back([this](const Regs& r) { with(kMinusHalf, [&](const auto& o) { vaddps(Z(r.v), Z(r.v), o); }); });
    out.push_back(std::move(s));
    s.clear();
    // sigmoid(v) into v, without clamps: nx=t1 e=t2 fn=t4 (exp: r=t5 p=t6 rr=t7)
    s.push_back([this](const Regs& r) { vpxord(Z(r.t[1]), Z(r.v), c(std::bit_cast<float>(0x80000000u))); });
    s.push_back([this](const Regs& r) { vmulps(Z(r.t[4]), Z(r.t[1]), c(1.44269504088896341f)); });
    s.push_back([this](const Regs& r) { vrndscaleps(Z(r.t[4]), Z(r.t[4]), 0x08); });
    s.push_back([this](const Regs& r) { vmovaps(Z(r.t[5]), Z(r.t[1])); });
    s.push_back([this](const Regs& r) { vfmadd231ps(Z(r.t[5]), Z(r.t[4]), c(-0.693359375f)); });
    s.push_back([this](const Regs& r) { vfmadd231ps(Z(r.t[5]), Z(r.t[4]), c(2.12194440e-4f)); });
    s.push_back([this](const Regs& r) { load(Z(r.t[6]), kP0); });
    for (int i = 1; i < 5; ++i)
      s.push_back([this, i](const Regs& r) { vfmadd213ps(Z(r.t[6]), Z(r.t[5]), c(kP[i])); });
    s.push_back([this](const Regs& r) { vmulps(Z(r.t[7]), Z(r.t[5]), Z(r.t[5])); });
    s.push_back([this](const Regs& r) { vfmadd213ps(Z(r.t[6]), Z(r.t[7]), Z(r.t[5])); });
    s.push_back([this](const Regs& r) { vaddps(Z(r.t[6]), Z(r.t[6]), c(1.0f)); });
    s.push_back([this](const Regs& r) { vscalefps(Z(r.t[2]), Z(r.t[6]), Z(r.t[4])); });
    s.push_back([this](const Regs& r) { vaddps(Z(r.t[2]), Z(r.t[2]), c(1.0f)); });
    s.push_back([this](const Regs& r) { load(Z(r.v), kOne); });
    s.push_back([this](const Regs& r) { vdivps(Z(r.v), Z(r.v), Z(r.t[2])); });
    out.push_back(std::move(s));
    s.clear();
    // relu(v * x)
    s.push_back([this](const Regs& r) { vmulps(Z(r.v), Z(r.v), Z(r.x)); });
    out.push_back(std::move(s));
    s.clear();
    s.push_back([this](const Regs& r) { vxorps(Z(r.t[0]), Z(r.t[0]), Z(r.t[0])); });
    s.push_back([this](const Regs& r) { vmaxps(Z(r.v), Z(r.t[0]), Z(r.v)); });
    s.push_back([this](const Regs& r) { vpandd(Z(r.v), Z(r.v), c(std::bit_cast<float>(0x7fffffffu))); });
    out.push_back(std::move(s));
    return out;
  }

  // void f(const float* x, float* y, int64_t n, const uint32_t* consts)
  Gen(int vectors, int group, bool pin) : CodeGenerator(1 << 16), pins(pin) {
    mov(r8, rdx);
    mov(rdx, rcx);
    xor_(r10, r10);
    if (pins)
      for (int p = 0; p < kPins; ++p) vbroadcastss(P(static_cast<Pin>(p)), cs(kPinValue[p]));
    const int top = pins ? 31 - kPins : 31;
    // scratch: 8 per group member from zmm(31 - kPins) down; values from zmm0 up
    std::vector<Regs> regs(static_cast<size_t>(vectors));
    for (int j = 0; j < vectors; ++j) {
      Regs& r = regs[static_cast<size_t>(j)];
      r.x = 2 * j;
      r.v = 2 * j + 1;
      const int m = j % group;
      for (int i = 0; i < 8; ++i) r.t[i] = top - 8 * m - i;
      r.k = 2 + m;
      if (r.t[7] <= 2 * vectors - 1) throw std::runtime_error("too many registers");
    }
    const std::vector<Seq> seq = ops();
    Label loop;
    L(loop);
    for (int j = 0; j < vectors; ++j) vmovups(Zmm(regs[j].x), ptr[rdi + r10 * 4 + 64 * j]);
    for (const Seq& op : seq)
      for (int g = 0; g < vectors; g += group)
        for (const auto& f : op)
          for (int m = 0; m < group; ++m) f(regs[static_cast<size_t>(g + m)]);
    for (int j = 0; j < vectors; ++j) vmovups(ptr[rsi + r10 * 4 + 64 * j], Zmm(regs[j].v));
    add(r10, 16 * vectors);
    cmp(r10, r8);
    jl(loop);
    vzeroupper();
    ret();
  }
};

}  // namespace

int main(int argc, char** argv) {
  const double ghz = argc > 1 ? std::stod(argv[1]) : 3.58;
  const int64_t n = 16 * 120;  // a multiple of 16 * 1, 2, 4, 8, 10, 12 vectors, in L1
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::ldexp(std::sin(i * 0.37) * 3, (i % 7) - 3);
  // math.h's scalar chain, as the interpreter computes it
  std::vector<uint32_t> ref(n);
  for (int64_t i = 0; i < n; ++i) {
    namespace m = lazytrace::cpu::math;
    using K = lazytrace::ir::OpKind;
    float v = m::unary(K::Tanh, x[i] * 1.5f + 0.25f);
    v = m::unary(K::Sigmoid, v * 2.0f - 0.5f);
    ref[i] = bits(m::unary(K::Relu, v * x[i]));
  }
  struct Config {
    int vectors, group;
    bool pins;
  };
  for (const Config& cf :
       {Config{8, 1, true}, Config{4, 1, true}, Config{2, 1, true}, Config{1, 1, true},
        Config{2, 2, true}, Config{4, 2, true}, Config{8, 1, false}, Config{10, 1, false},
        Config{12, 1, false}}) {
    Gen g(cf.vectors, cf.group, cf.pins);
    g.ready();
    const std::vector<uint32_t> pool = g.pool;
    auto f = g.getCode<void (*)(const float*, float*, int64_t, const uint32_t*)>();
    f(x.data(), y.data(), n, pool.data());
    std::vector<uint32_t> out(n);
    std::memcpy(out.data(), y.data(), n * 4);
    double best = 1e30;
    for (int rep = 0; rep < 20; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (int it = 0; it < 4000; ++it) f(x.data(), y.data(), n, pool.data());
      best = std::min(
          best,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 4000);
    }
    std::printf("chain, %2d vector(s), lockstep groups of %d, %-26s %6.2f cycles per 16 floats%s\n",
                cf.vectors, cf.group, cf.pins ? "constants in registers:" : "constants from memory:", best * ghz * 1e9 / (n / 16.0),
                out == ref ? "" : "  DIFFERENT BITS");
  }
}
