/* Scratch (issue 22, 2026-12-07): the clock, from a chain of dependent 64-bit imul (3 cycles
   each; a chain of adds is folded at rename on this core and reads too fast). gcc -O2 clk_imul.c */
#include <stdio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){ for(int r=0;r<4;r++){ long n=400000000; double t0=now(); long x=3; __asm__ volatile("mov %1, %%rcx\n1:\n imul %0,%0\n imul %0,%0\n imul %0,%0\n imul %0,%0\n sub $4,%%rcx\n jnz 1b\n":"+r"(x):"r"(n):"rcx"); double t=now()-t0; printf("%.2f GHz (%ld)\n", 3*n/t*1e-9, x);} }
