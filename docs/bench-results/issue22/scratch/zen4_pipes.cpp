// Zen 4 pipe probe: 8 independent zmm instructions of one kind per loop pass, alone and
// beside 8 independent FMAs, cycles per pass at 3.52 GHz (the clk.c clock of this VM):
// which instructions share the FMA pipes, which the add pipes, which go on either.
#include <cstdio>
#include <ctime>
static double now() { timespec a; clock_gettime(CLOCK_MONOTONIC, &a); return a.tv_sec + a.tv_nsec * 1e-9; }
alignas(64) float k[16] = {0.9999f, 0.0001f};
int main() {
  const long n = 20000000;
  double t;

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vfmadd213ps %%zmm21, %%zmm20, %%zmm8\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm9\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm10\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm11\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm12\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm13\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm14\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm15\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 FMAs", (now() - t) * 3.52e9 / n);

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vpcmpgtd %%zmm20, %%zmm0, %%k1\n"
"vpcmpgtd %%zmm20, %%zmm1, %%k2\n"
"vpcmpgtd %%zmm20, %%zmm2, %%k3\n"
"vpcmpgtd %%zmm20, %%zmm3, %%k4\n"
"vpcmpgtd %%zmm20, %%zmm4, %%k5\n"
"vpcmpgtd %%zmm20, %%zmm5, %%k6\n"
"vpcmpgtd %%zmm20, %%zmm6, %%k7\n"
"vpcmpgtd %%zmm20, %%zmm7, %%k1\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 vpcmpd->k", (now() - t) * 3.52e9 / n);

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vpcmpgtd %%zmm20, %%zmm0, %%k1\n"
"vpcmpgtd %%zmm20, %%zmm1, %%k2\n"
"vpcmpgtd %%zmm20, %%zmm2, %%k3\n"
"vpcmpgtd %%zmm20, %%zmm3, %%k4\n"
"vpcmpgtd %%zmm20, %%zmm4, %%k5\n"
"vpcmpgtd %%zmm20, %%zmm5, %%k6\n"
"vpcmpgtd %%zmm20, %%zmm6, %%k7\n"
"vpcmpgtd %%zmm20, %%zmm7, %%k1\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm8\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm9\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm10\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm11\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm12\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm13\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm14\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm15\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 vpcmpd->k + 8 FMAs", (now() - t) * 3.52e9 / n);

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vrangeps $9, %%zmm0, %%zmm20, %%zmm0\n"
"vrangeps $9, %%zmm1, %%zmm20, %%zmm1\n"
"vrangeps $9, %%zmm2, %%zmm20, %%zmm2\n"
"vrangeps $9, %%zmm3, %%zmm20, %%zmm3\n"
"vrangeps $9, %%zmm4, %%zmm20, %%zmm4\n"
"vrangeps $9, %%zmm5, %%zmm20, %%zmm5\n"
"vrangeps $9, %%zmm6, %%zmm20, %%zmm6\n"
"vrangeps $9, %%zmm7, %%zmm20, %%zmm7\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm8\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm9\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm10\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm11\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm12\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm13\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm14\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm15\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 vrangeps + 8 FMAs", (now() - t) * 3.52e9 / n);

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vrangeps $9, %%zmm0, %%zmm20, %%zmm0\n"
"vrangeps $9, %%zmm1, %%zmm20, %%zmm1\n"
"vrangeps $9, %%zmm2, %%zmm20, %%zmm2\n"
"vrangeps $9, %%zmm3, %%zmm20, %%zmm3\n"
"vrangeps $9, %%zmm4, %%zmm20, %%zmm4\n"
"vrangeps $9, %%zmm5, %%zmm20, %%zmm5\n"
"vrangeps $9, %%zmm6, %%zmm20, %%zmm6\n"
"vrangeps $9, %%zmm7, %%zmm20, %%zmm7\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 vrangeps", (now() - t) * 3.52e9 / n);

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vpandd %%zmm20, %%zmm0, %%zmm17\n vpord %%zmm17, %%zmm0, %%zmm0\n"
"vpandd %%zmm20, %%zmm1, %%zmm16\n vpord %%zmm16, %%zmm1, %%zmm1\n"
"vpandd %%zmm20, %%zmm2, %%zmm17\n vpord %%zmm17, %%zmm2, %%zmm2\n"
"vpandd %%zmm20, %%zmm3, %%zmm16\n vpord %%zmm16, %%zmm3, %%zmm3\n"
"vpandd %%zmm20, %%zmm4, %%zmm17\n vpord %%zmm17, %%zmm4, %%zmm4\n"
"vpandd %%zmm20, %%zmm5, %%zmm16\n vpord %%zmm16, %%zmm5, %%zmm5\n"
"vpandd %%zmm20, %%zmm6, %%zmm17\n vpord %%zmm17, %%zmm6, %%zmm6\n"
"vpandd %%zmm20, %%zmm7, %%zmm16\n vpord %%zmm16, %%zmm7, %%zmm7\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm8\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm9\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm10\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm11\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm12\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm13\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm14\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm15\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 (vpandd+vpord) + 8 FMAs", (now() - t) * 3.52e9 / n);

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vmaxps %%zmm0, %%zmm20, %%zmm0\n"
"vmaxps %%zmm1, %%zmm20, %%zmm1\n"
"vmaxps %%zmm2, %%zmm20, %%zmm2\n"
"vmaxps %%zmm3, %%zmm20, %%zmm3\n"
"vmaxps %%zmm4, %%zmm20, %%zmm4\n"
"vmaxps %%zmm5, %%zmm20, %%zmm5\n"
"vmaxps %%zmm6, %%zmm20, %%zmm6\n"
"vmaxps %%zmm7, %%zmm20, %%zmm7\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm8\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm9\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm10\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm11\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm12\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm13\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm14\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm15\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 vmaxps + 8 FMAs", (now() - t) * 3.52e9 / n);

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vsubps %%zmm0, %%zmm20, %%zmm0\n"
"vsubps %%zmm1, %%zmm20, %%zmm1\n"
"vsubps %%zmm2, %%zmm20, %%zmm2\n"
"vsubps %%zmm3, %%zmm20, %%zmm3\n"
"vsubps %%zmm4, %%zmm20, %%zmm4\n"
"vsubps %%zmm5, %%zmm20, %%zmm5\n"
"vsubps %%zmm6, %%zmm20, %%zmm6\n"
"vsubps %%zmm7, %%zmm20, %%zmm7\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm8\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm9\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm10\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm11\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm12\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm13\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm14\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm15\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 vsubps + 8 FMAs", (now() - t) * 3.52e9 / n);

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vmovaps %%zmm20, %%zmm0%{%%k1%}%{z%}\n"
"vmovaps %%zmm20, %%zmm1%{%%k1%}%{z%}\n"
"vmovaps %%zmm20, %%zmm2%{%%k1%}%{z%}\n"
"vmovaps %%zmm20, %%zmm3%{%%k1%}%{z%}\n"
"vmovaps %%zmm20, %%zmm4%{%%k1%}%{z%}\n"
"vmovaps %%zmm20, %%zmm5%{%%k1%}%{z%}\n"
"vmovaps %%zmm20, %%zmm6%{%%k1%}%{z%}\n"
"vmovaps %%zmm20, %%zmm7%{%%k1%}%{z%}\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm8\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm9\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm10\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm11\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm12\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm13\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm14\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm15\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 vmovaps{k}{z} + 8 FMAs", (now() - t) * 3.52e9 / n);

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vpxord %%zmm20, %%zmm0, %%zmm0\n"
"vpxord %%zmm20, %%zmm1, %%zmm1\n"
"vpxord %%zmm20, %%zmm2, %%zmm2\n"
"vpxord %%zmm20, %%zmm3, %%zmm3\n"
"vpxord %%zmm20, %%zmm4, %%zmm4\n"
"vpxord %%zmm20, %%zmm5, %%zmm5\n"
"vpxord %%zmm20, %%zmm6, %%zmm6\n"
"vpxord %%zmm20, %%zmm7, %%zmm7\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm8\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm9\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm10\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm11\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm12\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm13\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm14\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm15\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 vpxord + 8 FMAs", (now() - t) * 3.52e9 / n);

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vscalefps %%zmm20, %%zmm0, %%zmm0\n"
"vscalefps %%zmm20, %%zmm1, %%zmm1\n"
"vscalefps %%zmm20, %%zmm2, %%zmm2\n"
"vscalefps %%zmm20, %%zmm3, %%zmm3\n"
"vscalefps %%zmm20, %%zmm4, %%zmm4\n"
"vscalefps %%zmm20, %%zmm5, %%zmm5\n"
"vscalefps %%zmm20, %%zmm6, %%zmm6\n"
"vscalefps %%zmm20, %%zmm7, %%zmm7\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm8\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm9\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm10\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm11\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm12\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm13\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm14\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm15\n"
"vaddps %%zmm20, %%zmm16, %%zmm16\n"
"vaddps %%zmm20, %%zmm17, %%zmm17\n"
"vaddps %%zmm20, %%zmm18, %%zmm18\n"
"vaddps %%zmm20, %%zmm19, %%zmm19\n"
"vaddps %%zmm20, %%zmm16, %%zmm16\n"
"vaddps %%zmm20, %%zmm17, %%zmm17\n"
"vaddps %%zmm20, %%zmm18, %%zmm18\n"
"vaddps %%zmm20, %%zmm19, %%zmm19\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 vscalefps + 8 FMAs + 8 adds", (now() - t) * 3.52e9 / n);

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vrndscaleps $8, %%zmm0, %%zmm0\n"
"vrndscaleps $8, %%zmm1, %%zmm1\n"
"vrndscaleps $8, %%zmm2, %%zmm2\n"
"vrndscaleps $8, %%zmm3, %%zmm3\n"
"vrndscaleps $8, %%zmm4, %%zmm4\n"
"vrndscaleps $8, %%zmm5, %%zmm5\n"
"vrndscaleps $8, %%zmm6, %%zmm6\n"
"vrndscaleps $8, %%zmm7, %%zmm7\n"
"vaddps %%zmm20, %%zmm8, %%zmm8\n"
"vaddps %%zmm20, %%zmm9, %%zmm9\n"
"vaddps %%zmm20, %%zmm10, %%zmm10\n"
"vaddps %%zmm20, %%zmm11, %%zmm11\n"
"vaddps %%zmm20, %%zmm12, %%zmm12\n"
"vaddps %%zmm20, %%zmm13, %%zmm13\n"
"vaddps %%zmm20, %%zmm14, %%zmm14\n"
"vaddps %%zmm20, %%zmm15, %%zmm15\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 vrndscaleps + 8 adds", (now() - t) * 3.52e9 / n);

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vmaxps %%zmm0, %%zmm20, %%zmm0\n"
"vmaxps %%zmm1, %%zmm20, %%zmm1\n"
"vmaxps %%zmm2, %%zmm20, %%zmm2\n"
"vmaxps %%zmm3, %%zmm20, %%zmm3\n"
"vmaxps %%zmm4, %%zmm20, %%zmm4\n"
"vmaxps %%zmm5, %%zmm20, %%zmm5\n"
"vmaxps %%zmm6, %%zmm20, %%zmm6\n"
"vmaxps %%zmm7, %%zmm20, %%zmm7\n"
"vaddps %%zmm20, %%zmm8, %%zmm8\n"
"vaddps %%zmm20, %%zmm9, %%zmm9\n"
"vaddps %%zmm20, %%zmm10, %%zmm10\n"
"vaddps %%zmm20, %%zmm11, %%zmm11\n"
"vaddps %%zmm20, %%zmm12, %%zmm12\n"
"vaddps %%zmm20, %%zmm13, %%zmm13\n"
"vaddps %%zmm20, %%zmm14, %%zmm14\n"
"vaddps %%zmm20, %%zmm15, %%zmm15\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 vmaxps + 8 adds", (now() - t) * 3.52e9 / n);

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vaddps %%zmm20, %%zmm8, %%zmm8\n"
"vaddps %%zmm20, %%zmm9, %%zmm9\n"
"vaddps %%zmm20, %%zmm10, %%zmm10\n"
"vaddps %%zmm20, %%zmm11, %%zmm11\n"
"vaddps %%zmm20, %%zmm12, %%zmm12\n"
"vaddps %%zmm20, %%zmm13, %%zmm13\n"
"vaddps %%zmm20, %%zmm14, %%zmm14\n"
"vaddps %%zmm20, %%zmm15, %%zmm15\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 adds", (now() - t) * 3.52e9 / n);

  t = now();
  __asm__ volatile(
      "vbroadcastss %1, %%zmm20\n vbroadcastss %2, %%zmm21\n"
      "mov %0, %%rcx\n"
      "1:\n"
      "vdivps %%zmm0, %%zmm20, %%zmm0\n"
"vdivps %%zmm1, %%zmm20, %%zmm1\n"
"vdivps %%zmm2, %%zmm20, %%zmm2\n"
"vdivps %%zmm3, %%zmm20, %%zmm3\n"
"vdivps %%zmm4, %%zmm20, %%zmm4\n"
"vdivps %%zmm5, %%zmm20, %%zmm5\n"
"vdivps %%zmm6, %%zmm20, %%zmm6\n"
"vdivps %%zmm7, %%zmm20, %%zmm7\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm8\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm9\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm10\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm11\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm12\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm13\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm14\n"
"vfmadd213ps %%zmm21, %%zmm20, %%zmm15\n"

      "dec %%rcx\n jnz 1b\n"
      :
      : "r"(n), "m"(k[0]), "m"(k[1])
      : "rcx", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm20", "zmm21", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  std::printf("%-40s %.2f cycles\n", "8 vdivps + 8 FMAs", (now() - t) * 3.52e9 / n);
}
