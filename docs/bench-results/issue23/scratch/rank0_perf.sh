#!/bin/bash
# Profiles rank 0 of an mpirun job (docs/benchmarks.md, dist_scaling, 2026-12-07): rank 0 runs
# under `perf record -F 2000` into r0.data, the other ranks as they are. From the repository:
#   T="train --hidden 512 --intermediate 2048 --heads 8 --kv-heads 4 --layers 4 --seq 256 --batch 4 --steps 30 --log-every 1000000 --out /dev/null"
#   mpirun -np 2 --oversubscribe -x LAZYTRACE_NUM_THREADS=1 docs/bench-results/issue23/scratch/rank0_perf.sh build/apps/lazytrace $T [--shard-optimizer]
#   perf report -i r0.data --time 40%-100% --no-children --sort sym --stdio   # the steady steps
if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then exec perf record -q -F 2000 -o r0.data "$@"; else exec "$@"; fi
