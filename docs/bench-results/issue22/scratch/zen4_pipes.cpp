// Zen 4 pipe probe: 8 independent zmm instructions of one kind per loop pass, alone and
// beside 8 independent FMAs or adds, cycles per pass at 3.52 GHz (the clk.c clock of this
// VM): which instructions share the FMA pipes, which the add pipes, which go on either.
#include <cstdio>
#include <ctime>

static double now() {
  timespec a;
  clock_gettime(CLOCK_MONOTONIC, &a);
  return a.tv_sec + a.tv_nsec * 1e-9;
}
alignas(64) float k[16] = {0.9999f, 0.0001f};

// one instruction on each of 8 registers: the probed ones on zmm0-7, the FMAs on zmm8-15,
// the adds on zmm16-23; zmm30 and zmm31 hold constants, k4 all ones
#define R8(I) I(0) I(1) I(2) I(3) I(4) I(5) I(6) I(7)
#define FMAS                                                                        \
  "vfmadd213ps %%zmm31, %%zmm30, %%zmm8\n vfmadd213ps %%zmm31, %%zmm30, %%zmm9\n"   \
  "vfmadd213ps %%zmm31, %%zmm30, %%zmm10\n vfmadd213ps %%zmm31, %%zmm30, %%zmm11\n" \
  "vfmadd213ps %%zmm31, %%zmm30, %%zmm12\n vfmadd213ps %%zmm31, %%zmm30, %%zmm13\n" \
  "vfmadd213ps %%zmm31, %%zmm30, %%zmm14\n vfmadd213ps %%zmm31, %%zmm30, %%zmm15\n"
#define ADDS                                                              \
  "vaddps %%zmm30, %%zmm16, %%zmm16\n vaddps %%zmm30, %%zmm17, %%zmm17\n" \
  "vaddps %%zmm30, %%zmm18, %%zmm18\n vaddps %%zmm30, %%zmm19, %%zmm19\n" \
  "vaddps %%zmm30, %%zmm20, %%zmm20\n vaddps %%zmm30, %%zmm21, %%zmm21\n" \
  "vaddps %%zmm30, %%zmm22, %%zmm22\n vaddps %%zmm30, %%zmm23, %%zmm23\n"
#define ADD(i) "vaddps %%zmm30, %%zmm" #i ", %%zmm" #i "\n"
#define MUL(i) "vmulps %%zmm30, %%zmm" #i ", %%zmm" #i "\n"
#define MIN(i) "vminps %%zmm" #i ", %%zmm30, %%zmm" #i "\n"
#define RANGE(i) "vrangeps $9, %%zmm" #i ", %%zmm30, %%zmm" #i "\n"
#define RND(i) "vrndscaleps $8, %%zmm" #i ", %%zmm" #i "\n"
#define SCALEF(i) "vscalefps %%zmm30, %%zmm" #i ", %%zmm" #i "\n"
#define FIXUP(i) "vfixupimmps $0, %%zmm30, %%zmm31, %%zmm" #i "\n"
#define TERN(i) "vpternlogd $0xF8, %%zmm30, %%zmm31, %%zmm" #i "\n"
#define AND(i) "vpandd %%zmm30, %%zmm" #i ", %%zmm" #i "\n"
#define CMP(i) "vcmpltps %%zmm30, %%zmm" #i ", %%k1\n"
#define PCMP(i) "vpcmpgtd %%zmm30, %%zmm" #i ", %%k2\n"
#define MOVM(i) "vpmovd2m %%zmm" #i ", %%k3\n"
#define MOVK(i) "vmovaps %%zmm30, %%zmm" #i "%{%%k4%}\n"
#define BCASTK(i) "vbroadcastss %1, %%zmm" #i "%{%%k4%}\n"
#define CVT(i) "vcvttps2dq %%zmm" #i ", %%zmm" #i "\n"
#define SHL(i) "vpslld $1, %%zmm" #i ", %%zmm" #i "\n"
#define DIV(i) "vdivps %%zmm" #i ", %%zmm30, %%zmm" #i "\n"
#define PROBE(name, body)                                                                         \
  {                                                                                               \
    const double t = now();                                                                       \
    __asm__ volatile(                                                                             \
        "vbroadcastss %1, %%zmm30\n vbroadcastss %2, %%zmm31\n"                                   \
        "kxnorw %%k4, %%k4, %%k4\n mov %0, %%rcx\n 1:\n" body "dec %%rcx\n jnz 1b\n"              \
        :                                                                                         \
        : "r"(n), "m"(k[0]), "m"(k[1])                                                            \
        : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9",  \
          "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm16", "zmm17", "zmm18",        \
          "zmm19", "zmm20", "zmm21", "zmm22", "zmm23", "zmm30", "zmm31", "k1", "k2", "k3", "k4"); \
    std::printf("%-28s %6.2f cycles\n", name, (now() - t) * 3.52e9 / n);                          \
  }
#define THREE(name, I)                \
  PROBE(name " alone", R8(I))         \
  PROBE(name " + 8 FMAs", R8(I) FMAS) \
  PROBE(name " + 8 adds", R8(I) ADDS)

int main() {
  const long n = 20000000;
  PROBE("8 FMAs", FMAS)
  PROBE("8 adds", ADDS)
  PROBE("8 FMAs + 8 adds", FMAS ADDS)
  THREE("8 mul", MUL)
  THREE("8 add", ADD)
  THREE("8 min", MIN)
  THREE("8 vrangeps", RANGE)
  THREE("8 vrndscaleps", RND)
  THREE("8 vscalefps", SCALEF)
  THREE("8 vfixupimmps", FIXUP)
  THREE("8 vpternlogd", TERN)
  THREE("8 vpandd", AND)
  THREE("8 vcmpps to k", CMP)
  THREE("8 vpcmpgtd to k", PCMP)
  THREE("8 vpmovd2m", MOVM)
  THREE("8 masked vmovaps", MOVK)
  THREE("8 masked vbroadcastss", BCASTK)
  THREE("8 vcvttps2dq", CVT)
  THREE("8 vpslld", SHL)
  THREE("8 vdivps", DIV)
}
