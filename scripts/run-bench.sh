#!/usr/bin/env bash
# Runs every benchmark program in BUILD_DIR/bench: console output here, JSON in
# BUILD_DIR/bench-results/<name>.json.
# Usage: scripts/run-bench.sh BUILD_DIR [--quick | --smoke] [-- EXTRA_BENCHMARK_FLAGS...]
#   --quick  a short run (--benchmark_min_time=0.05); its numbers are not for the docs.
#   --smoke  every benchmark once, to show each program still builds and runs (CI); JSON in
#            BUILD_DIR/bench-smoke instead, so it never replaces a real run's.
set -euo pipefail

usage() { echo "usage: $0 BUILD_DIR [--quick] [-- extra --benchmark_* flags]"; }

build_dir=""
extra=()
smoke=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) extra+=(--benchmark_min_time=0.05) ;;
    --smoke) extra+=(--benchmark_min_time=0.000001); smoke=1 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra+=("$@"); break ;;
    -*) echo "run-bench: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    *)
      if [ -n "$build_dir" ]; then usage >&2; exit 2; fi
      build_dir="$1" ;;
  esac
  shift
done
if [ -z "$build_dir" ]; then usage >&2; exit 2; fi

bench_dir="$build_dir/bench"
out_dir="$build_dir/bench-results"
if [ "$smoke" = 1 ]; then out_dir="$build_dir/bench-smoke"; fi
if [ ! -d "$bench_dir" ]; then
  echo "run-bench: no $bench_dir (configure with -DLAZYTRACE_BUILD_BENCH=ON and build)" >&2
  exit 1
fi
mkdir -p "$out_dir"

ran=0
for exe in "$bench_dir"/*_bench; do
  if [ ! -f "$exe" ] || [ ! -x "$exe" ]; then continue; fi
  name="$(basename "$exe")"
  echo "== $name"
  "$exe" --benchmark_format=console \
    --benchmark_out="$out_dir/$name.json" --benchmark_out_format=json \
    ${extra[@]+"${extra[@]}"}
  ran=$((ran + 1))
done
if [ "$ran" -eq 0 ]; then
  echo "run-bench: no *_bench programs in $bench_dir" >&2
  exit 1
fi
echo "run-bench: $ran programs; JSON in $out_dir"
