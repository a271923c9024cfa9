#!/usr/bin/env bash
# An A/B of two builds of the benchmark programs on this machine, in one session: each
# program runs from the "before" build, then from the "after" build, one program at a time,
# so the VM's drift touches both alike. JSON in OUT_DIR/before and OUT_DIR/after, for
# scripts/bench-report.py OUT_DIR/after --before OUT_DIR/before.
# Usage: scripts/bench-ab.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR OUT_DIR [PROGRAM...] [-- flags...]
#   PROGRAM: e.g. tracing_bench (default: every *_bench of the after build)
#   flags: for every program (default: --benchmark_repetitions=3
#   --benchmark_report_aggregates_only=true)
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 BEFORE_BUILD_DIR AFTER_BUILD_DIR OUT_DIR [PROGRAM...] [-- flags...]" >&2
  exit 2
fi
before="$1" after="$2" out="$3"
shift 3
programs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  programs+=("$1")
  shift
done
flags=(--benchmark_repetitions=3 --benchmark_report_aggregates_only=true)
if [ "${1:-}" = "--" ]; then
  shift
  flags=("$@")
fi
if [ ${#programs[@]} -eq 0 ]; then
  for exe in "$after"/bench/*_bench; do programs+=("$(basename "$exe")"); done
fi
mkdir -p "$out/before" "$out/after"
for name in "${programs[@]}"; do
  for side in before after; do
    dir="$before"
    if [ "$side" = after ]; then dir="$after"; fi
    if [ ! -x "$dir/bench/$name" ]; then
      echo "bench-ab: no $dir/bench/$name; skipped" >&2
      continue
    fi
    echo "== $name ($side)"
    "$dir/bench/$name" --benchmark_format=console --benchmark_out="$out/$side/$name.json" \
      --benchmark_out_format=json "${flags[@]}"
  done
done
echo "bench-ab: JSON in $out/before and $out/after"
