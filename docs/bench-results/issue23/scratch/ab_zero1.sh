#!/bin/bash
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
A="train --hidden 512 --intermediate 2048 --heads 8 --kv-heads 4 --layers 4 --seq 256 --log-every 1000000 --out /dev/null --steps 20 --batch 4"
M="mpirun -np 2 --oversubscribe -x LAZYTRACE_NUM_THREADS=1"
NO="-x LAZYTRACE_DISABLE_PASSES=overlap_collectives"
step() { grep -E -o 'step [0-9.]+ ms|collectives [0-9.]+' | tr '\n' ' '; }
for rep in $(seq 1 ${REPS:-3}); do
  echo "rep $rep"
  echo "  1x2 threads: $(LAZYTRACE_NUM_THREADS=2 /tmp/lt_new $A | step)"
  for b in old new; do
    echo "  $b zero1: $($M /tmp/lt_$b $A --shard-optimizer | step)"
    echo "  $b zero1 no overlap: $($M $NO /tmp/lt_$b $A --shard-optimizer | step)"
  done
  echo "  allreduce: $($M /tmp/lt_new $A | step)"
done
