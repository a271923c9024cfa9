#include <stdio.h>
#include <time.h>
int main() {
  struct timespec a, b;
  long n = 2000000000;
  clock_gettime(CLOCK_MONOTONIC, &a);
  __asm__ volatile("1: dec %0; jnz 1b" : "+r"(n));
  clock_gettime(CLOCK_MONOTONIC, &b);
  double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
  printf("%.2f GHz\n", 2.0 / s);
}
