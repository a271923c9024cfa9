// kernels_bench's chain with tanh and sigmoid (relu(sigmoid(2 tanh(1.5 x + 0.25) - 0.5) x)),
// the native code's instructions (jit_elementwise.cpp at b383506: the ops' constants in
// registers, sigmoid without its clamps as jit_ranges leaves it), over a tile in L1, V vectors
// a pass, emitted op by op (each op for every vector, the library's order) and with the
// vectors in lockstep groups of G (each instruction of an op for the G vectors of a group,
// each with scratch registers of its own). Cycles per 16 floats (argv[1]: the clock in GHz);
// every variant's bits against math.h's scalar chain (build with -ffp-contract=off -Isrc
// -Iinclude). With argv[2] = "variants": the instructions changed four ways (Variant), 8
// vectors op by op, each beside the unchanged code, three rounds; "timing": the same for
// an instruction replaced by a cheaper one with other bits, to see what it costs.
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/math.h"
#include "xbyak_tile.h"

using namespace Xbyak;

namespace {

constexpr float kP[] = {0.0013814551057294011f, 0.00836869329214096f, 0.04166838526725769f,
                        0.1666652113199234f, 0.4999999403953552f};
constexpr float kT[] = {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f,
                        1.33314422036e-1f, -3.33332819422e-1f};

struct Regs {  // one vector's: x, its running value v, scratch t[0..7], mask k
  int x, v, t[8], k;
};
using Seq = std::vector<std::function<void(const Regs&)>>;

// registers kept for the whole loop: the ops' constants and the step's single values (and
// 32 kP[0] for Variant::kTanhHalf)
enum Pin { kP0, kTwo, kT0, kOne, kA, kB, kMinusHalf, kP0x32, kPins };
constexpr float kPinValue[kPins] = {kP[0], 2.0f, kT[0], 1.0f, 1.5f, 0.25f, -0.5f, 32 * kP[0]};

enum class Variant {
  kNone,
  kReluFixup,  // relu by one vfixupimmps (NaN kept, zeros and negatives +0), not max and and
  kTanhHalf,   // tanh's reduction and polynomial in |x| with their constants scaled by
               // powers of 2 (exactly), not in 2|x|: no add for 2|x|, an FMA for 1 + q
  kSignAndn,   // tanh's sign by and-not and xor, not vpternlogd
  kRInPlace,   // exp's r (tanh's) written over 2|x|, not over a copy of it
  // timing only (other bits): what an instruction costs the chain, by a cheaper one in its
  // place
  kDivsAsMul,     // both divisions as multiplies
  kTanhDivAsMul,  // tanh's division as a multiply
  kSigDivAsMul,   // sigmoid's
  kScalefAsAdd,   // both vscalefps as adds
};

struct Gen : tile::PoolGen {
  bool pins = true;  // else the single values as broadcast memory operands, the ops'
                     // constants broadcast at each use
  Variant variant = Variant::kNone;
  static Zmm P(Pin p) { return Zmm(31 - p); }
  static Zmm Z(int i) { return Zmm(i); }
  // f(pinned value p as an operand: its register, or a broadcast from memory)
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

  // exp's polynomial: t[p] = 1 + r + r^2 P(r) from r in t[r], math.h's steps, with the
  // coefficients times 2^(5 - i) where `halved` (r / 2 in t[r], 2 P's steps' scale, and 1 + q
  // by an FMA); t[rr] scratch
  void exp_poly(Seq& s, int r, int p, int rr, bool halved = false) {
    s.push_back([=, this](const Regs& g) { load(Z(g.t[p]), halved ? kP0x32 : kP0); });
    for (int i = 1; i < 5; ++i)
      s.push_back([=, this](const Regs& g) {
        vfmadd213ps(Z(g.t[p]), Z(g.t[r]), c(halved ? std::ldexp(kP[i], 5 - i) : kP[i]));
      });
    s.push_back([=, this](const Regs& g) { vmulps(Z(g.t[rr]), Z(g.t[r]), Z(g.t[r])); });
    s.push_back([=, this](const Regs& g) { vfmadd213ps(Z(g.t[p]), Z(g.t[rr]), Z(g.t[r])); });
    if (halved)
      s.push_back([=, this](const Regs& g) { vfmadd213ps(Z(g.t[p]), P(kTwo), c(1.0f)); });
    else
      s.push_back([=, this](const Regs& g) { vaddps(Z(g.t[p]), Z(g.t[p]), c(1.0f)); });
  }

  // t[d] = t[p] 2^t[n] (kScalefAsAdd: t[p] + t[n])
  void scalef(Seq& s, int d, int p, int n) {
    if (variant == Variant::kScalefAsAdd)
      s.push_back([=, this](const Regs& r) { vaddps(Z(r.t[d]), Z(r.t[p]), Z(r.t[n])); });
    else
      s.push_back([=, this](const Regs& r) { vscalefps(Z(r.t[d]), Z(r.t[p]), Z(r.t[n])); });
  }

  // the chain's ops, each a list of instructions
  std::vector<Seq> ops() {
    std::vector<Seq> out;
    auto op = [&](Seq s) { out.push_back(std::move(s)); };
    // v = x * 1.5, + 0.25
    op({[this](const Regs& r) { with(kA, [&](const auto& o) { vmulps(Z(r.v), Z(r.x), o); }); }});
    op({[this](const Regs& r) { with(kB, [&](const auto& o) { vaddps(Z(r.v), Z(r.v), o); }); }});
    // tanh(v) into v: ax=t0 e=t1 fn=t2 den=t3 s=t4 z=t5 (exp: r=t5 p=t6 rr=t7)
    Seq s;
    s.push_back([this](const Regs& r) { vpandd(Z(r.t[0]), Z(r.v), cb(0x7fffffffu)); });
    if (variant == Variant::kTanhHalf) {
      s.push_back([this](const Regs& r) { vminps(Z(r.t[1]), Z(r.t[0]), c(10.0f)); });
      s.push_back(
          [this](const Regs& r) { vmulps(Z(r.t[2]), Z(r.t[1]), c(2 * 1.44269504088896341f)); });
    } else {
      s.push_back([this](const Regs& r) { vaddps(Z(r.t[1]), Z(r.t[0]), Z(r.t[0])); });
      s.push_back([this](const Regs& r) { vminps(Z(r.t[1]), Z(r.t[1]), c(20.0f)); });
      s.push_back([this](const Regs& r) { vmulps(Z(r.t[2]), Z(r.t[1]), c(1.44269504088896341f)); });
    }
    s.push_back([this](const Regs& r) { vrndscaleps(Z(r.t[2]), Z(r.t[2]), 0x08); });
    const float ln2 = variant == Variant::kTanhHalf ? -0.693147182f / 2 : -0.693147182f;
    const int er = variant == Variant::kRInPlace ? 1 : 5;  // exp's r
    if (er != 1) s.push_back([this](const Regs& r) { vmovaps(Z(r.t[5]), Z(r.t[1])); });
    s.push_back([=, this](const Regs& r) { vfmadd231ps(Z(r.t[er]), Z(r.t[2]), c(ln2)); });
    exp_poly(s, er, 6, 7, variant == Variant::kTanhHalf);
    scalef(s, 3, 6, 2);
    s.push_back([this](const Regs& r) { vaddps(Z(r.t[3]), Z(r.t[3]), c(1.0f)); });
    s.push_back([this](const Regs& r) { load(Z(r.t[1]), kTwo); });
    if (variant == Variant::kDivsAsMul || variant == Variant::kTanhDivAsMul)
      s.push_back([this](const Regs& r) { vmulps(Z(r.t[1]), Z(r.t[1]), Z(r.t[3])); });
    else
      s.push_back([this](const Regs& r) { vdivps(Z(r.t[1]), Z(r.t[1]), Z(r.t[3])); });
    s.push_back([this](const Regs& r) { vsubps(Z(r.t[4]), Z(r.t[1]), c(1.0f)); });
    if (variant == Variant::kSignAndn) {
      s.push_back([this](const Regs& r) { vpandnd(Z(r.t[2]), Z(r.v), cb(0x80000000u)); });
      s.push_back([this](const Regs& r) { vpxord(Z(r.t[4]), Z(r.t[4]), Z(r.t[2])); });
    } else {
      s.push_back([this](const Regs& r) { vpternlogd(Z(r.t[4]), Z(r.v), cb(0x80000000u), 0xd2); });
    }
    s.push_back([this](const Regs& r) { vmulps(Z(r.t[5]), Z(r.v), Z(r.v)); });
    s.push_back([this](const Regs& r) { load(Z(r.t[1]), kT0); });
    for (int i = 1; i < 5; ++i)
      s.push_back([this, i](const Regs& r) { vfmadd213ps(Z(r.t[1]), Z(r.t[5]), c(kT[i])); });
    s.push_back([this](const Regs& r) { vmulps(Z(r.t[1]), Z(r.t[1]), Z(r.t[5])); });
    s.push_back([this](const Regs& r) { vfmadd213ps(Z(r.t[1]), Z(r.v), Z(r.v)); });
    s.push_back([this](const Regs& r) { vcmpps(Opmask(r.k), Z(r.t[0]), c(0.625f), 0x19); });
    s.push_back([this](const Regs& r) { vmovaps(Z(r.t[4]) | Opmask(r.k), Z(r.t[1])); });
    s.push_back([this](const Regs& r) { vmovaps(Z(r.v), Z(r.t[4])); });
    op(std::move(s));
    // v = v * 2, + -0.5
    op({[this](const Regs& r) { with(kTwo, [&](const auto& o) { vmulps(Z(r.v), Z(r.v), o); }); }});
    op({[this](const Regs& r) {
      with(kMinusHalf, [&](const auto& o) { vaddps(Z(r.v), Z(r.v), o); });
    }});
    // sigmoid(v) into v, without clamps: nx=t1 e=t2 fn=t4 (exp: r=t5 p=t6 rr=t7)
    s.clear();
    s.push_back([this](const Regs& r) { vpxord(Z(r.t[1]), Z(r.v), cb(0x80000000u)); });
    s.push_back([this](const Regs& r) { vmulps(Z(r.t[4]), Z(r.t[1]), c(1.44269504088896341f)); });
    s.push_back([this](const Regs& r) { vrndscaleps(Z(r.t[4]), Z(r.t[4]), 0x08); });
    s.push_back([this](const Regs& r) { vmovaps(Z(r.t[5]), Z(r.t[1])); });
    s.push_back([this](const Regs& r) { vfmadd231ps(Z(r.t[5]), Z(r.t[4]), c(-0.693359375f)); });
    s.push_back([this](const Regs& r) { vfmadd231ps(Z(r.t[5]), Z(r.t[4]), c(2.12194440e-4f)); });
    exp_poly(s, 5, 6, 7);
    scalef(s, 2, 6, 4);
    s.push_back([this](const Regs& r) { vaddps(Z(r.t[2]), Z(r.t[2]), c(1.0f)); });
    s.push_back([this](const Regs& r) { load(Z(r.v), kOne); });
    if (variant == Variant::kDivsAsMul || variant == Variant::kSigDivAsMul)
      s.push_back([this](const Regs& r) { vmulps(Z(r.v), Z(r.v), Z(r.t[2])); });
    else
      s.push_back([this](const Regs& r) { vdivps(Z(r.v), Z(r.v), Z(r.t[2])); });
    op(std::move(s));
    // relu(v * x)
    op({[this](const Regs& r) { vmulps(Z(r.v), Z(r.v), Z(r.x)); }});
    if (variant == Variant::kReluFixup) {
      op({[this](const Regs& r) { vfixupimmps(Z(r.v), Z(r.v), cb(0x18181821u), 0); }});
    } else {
      op({[this](const Regs& r) { vxorps(Z(r.t[0]), Z(r.t[0]), Z(r.t[0])); },
          [this](const Regs& r) { vmaxps(Z(r.v), Z(r.t[0]), Z(r.v)); },
          [this](const Regs& r) { vpandd(Z(r.v), Z(r.v), cb(0x7fffffffu)); }});
    }
    return out;
  }

  Gen(int vectors, int group, bool pin, Variant v) : pins(pin), variant(v) {
    begin();
    if (pins)
      for (int p = 0; p < kPins; ++p) vbroadcastss(P(static_cast<Pin>(p)), cs(kPinValue[p]));
    const int top = pins ? 31 - kPins : 31;
    // scratch: 8 per group member below the pinned values; values from zmm0 up
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
    end(loop, vectors);
  }
};

}  // namespace

int main(int argc, char** argv) {
  const double ghz = argc > 1 ? std::stod(argv[1]) : 3.58;
  const std::string mode = argc > 2 ? argv[2] : "";
  // 16 floats times 1, 2, 4, 8, 10, 12 vectors
  const std::vector<float> x = tile::input(16 * 120);
  // math.h's scalar chain, as the interpreter computes it
  std::vector<uint32_t> ref(x.size()), out;
  for (size_t i = 0; i < x.size(); ++i) {
    namespace m = lazytrace::cpu::math;
    using K = lazytrace::ir::OpKind;
    float v = m::unary(K::Tanh, x[i] * 1.5f + 0.25f);
    v = m::unary(K::Sigmoid, v * 2.0f - 0.5f);
    ref[i] = tile::bits(m::unary(K::Relu, v * x[i]));
  }
  struct Config {
    int vectors, group;
    bool pins;
    Variant variant;
    const char* name;
  };
  std::vector<Config> configs;
  using V = std::pair<Variant, const char*>;
  const std::vector<V> kept = {{Variant::kReluFixup, "relu by vfixupimmps"},
                               {Variant::kTanhHalf, "tanh from |x|, no 2|x|"},
                               {Variant::kSignAndn, "tanh's sign by andn, xor"},
                               {Variant::kRInPlace, "exp's r in place of 2|x|"}};
  const std::vector<V> timing = {{Variant::kDivsAsMul, "divisions as multiplies"},
                                 {Variant::kTanhDivAsMul, "tanh's division as a multiply"},
                                 {Variant::kSigDivAsMul, "sigmoid's division as a multiply"},
                                 {Variant::kScalefAsAdd, "vscalefps as adds"}};
  if (mode == "variants" || mode == "timing") {
    for (int round = 0; round < 3; ++round)
      for (auto [v, name] : mode == "variants" ? kept : timing) {
        configs.push_back({8, 1, true, Variant::kNone, "as the library"});
        configs.push_back({8, 1, true, v, name});
      }
  } else {
    for (auto [vectors, group, pins] : {std::tuple{8, 1, true},
                                        {4, 1, true},
                                        {2, 1, true},
                                        {1, 1, true},
                                        {2, 2, true},
                                        {4, 2, true},
                                        {8, 1, false},
                                        {10, 1, false},
                                        {12, 1, false}})
      configs.push_back({vectors, group, pins, Variant::kNone, ""});
  }
  for (const Config& cf : configs) {
    Gen g(cf.vectors, cf.group, cf.pins, cf.variant);
    const double cycles = tile::cycles(g, x, out, ghz);
    std::printf(
        "chain, %2d vector(s), lockstep groups of %d, %-26s %6.2f cycles per 16 floats%s  %s\n",
        cf.vectors, cf.group,
        cf.pins ? "constants in registers:" : "constants from memory:", cycles,
        out == ref ? "" : "  DIFFERENT BITS", cf.name);
  }
}
