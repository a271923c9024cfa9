#!/bin/bash
# OpenBLAS's core on this CPU, with and without OPENBLAS_CORETYPE (docs/gemm.md, "OpenBLAS
# does not know this CPU", 2026-12-07). From the repository, after `make build` and the
# bench build (build-bench):
for ct in unset Haswell SkylakeX; do
  if [ $ct = unset ]; then E="env -u OPENBLAS_CORETYPE"; else E="env OPENBLAS_CORETYPE=$ct"; fi
  echo "[$ct] $($E OPENBLAS_VERBOSE=2 build-bench/bench/gemm_bench --benchmark_min_time=0.3 \
    --benchmark_filter='BM_OpenBLAS/tokens:512/hidden:512/inter:2048/product:0/' 2>&1 |
    grep -o 'Core: [A-Za-z]*\|GFLOPS=[0-9.]*' | tr '\n' ' ')"
done
# the compute-heavy training step, alternated with and without it (2 threads)
T="train --hidden 512 --intermediate 2048 --heads 8 --kv-heads 4 --layers 4 --seq 256 --batch 4 --steps 12 --log-every 1000000 --out /dev/null"
for i in 1 2 3; do
  echo "unset: $(env -u OPENBLAS_CORETYPE LAZYTRACE_NUM_THREADS=2 build/apps/lazytrace $T | grep -o 'step [0-9.]* ms (.*first step [0-9.]* ms')"
  echo "SkylakeX: $(OPENBLAS_CORETYPE=SkylakeX LAZYTRACE_NUM_THREADS=2 build/apps/lazytrace $T | grep -o 'step [0-9.]* ms (.*first step [0-9.]* ms')"
done
