#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now() {
  struct timespec a;
  clock_gettime(CLOCK_MONOTONIC, &a);
  return a.tv_sec + a.tv_nsec * 1e-9;
}
int main() {
  long n = 200000000;
  __m512 a0 = _mm512_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0,
         m = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(0.0001f);
  double t = now();
  for (long i = 0; i < n; i++) {
    a0 = _mm512_fmadd_ps(a0, m, c);
    a1 = _mm512_fmadd_ps(a1, m, c);
    a2 = _mm512_fmadd_ps(a2, m, c);
    a3 = _mm512_fmadd_ps(a3, m, c);
    a4 = _mm512_fmadd_ps(a4, m, c);
    a5 = _mm512_fmadd_ps(a5, m, c);
    a6 = _mm512_fmadd_ps(a6, m, c);
    a7 = _mm512_fmadd_ps(a7, m, c);
    __asm__ volatile(""
                     : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6),
                       "+v"(a7));
  }
  double s = now() - t;
  printf("zmm fma: %.2f per ns (%.2f/cycle at 4GHz)\n", 8.0 * n / s * 1e-9, 8.0 * n / s * 1e-9 / 4);
  __m512 d0 = a0, d1 = a1, d2 = a2, d3 = a3;
  __m512 one = _mm512_set1_ps(1.0f);
  t = now();
  n = 50000000;
  for (long i = 0; i < n; i++) {
    d0 = _mm512_div_ps(one, d0);
    d1 = _mm512_div_ps(one, d1);
    d2 = _mm512_div_ps(one, d2);
    d3 = _mm512_div_ps(one, d3);
    __asm__ volatile("" : "+v"(d0), "+v"(d1), "+v"(d2), "+v"(d3));
  }
  s = now() - t;
  printf("zmm div: %.2f cycles each (throughput, 4 chains, 4GHz)\n", s * 4e9 / (4.0 * n));
  __m256 e0 = _mm256_set1_ps(1.1f), e1 = e0, e2 = e0, e3 = e0;
  __m256 one8 = _mm256_set1_ps(1.0f);
  t = now();
  for (long i = 0; i < n; i++) {
    e0 = _mm256_div_ps(one8, e0);
    e1 = _mm256_div_ps(one8, e1);
    e2 = _mm256_div_ps(one8, e2);
    e3 = _mm256_div_ps(one8, e3);
  }
  s = now() - t;
  printf("ymm div: %.2f cycles each\n", s * 4e9 / (4.0 * n));
  float o[16];
  _mm512_storeu_ps(o, _mm512_add_ps(_mm512_add_ps(a0, a7), _mm512_add_ps(d0, d3)));
  _mm256_storeu_ps(o, _mm256_add_ps(e0, e3));
  printf("%f\n", o[0]);
}
