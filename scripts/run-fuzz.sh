#!/usr/bin/env bash
# Runs each libFuzzer target in BUILD_DIR/tests/libfuzzer for SECONDS (or until FUZZ_RUNS
# executions, where that is set and comes first), on a corpus that starts from
# tests/libfuzzer/seeds and grows in BUILD_DIR/fuzz-corpus/<target>. A crash stops the run
# with the crashing input saved in BUILD_DIR/fuzz-crashes.
# Usage: [FUZZ_RUNS=N] scripts/run-fuzz.sh BUILD_DIR SECONDS [TARGET...]
set -euo pipefail
build="${1:?usage: $0 BUILD_DIR SECONDS [TARGET...]}"
seconds="${2:?usage: $0 BUILD_DIR SECONDS [TARGET...]}"
shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors_fuzz safetensors_struct_fuzz header_fuzz)
runs="${FUZZ_RUNS:--1}"
here="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$build/fuzz-crashes"
for target in "${targets[@]}"; do
  exe="$build/tests/libfuzzer/$target"
  corpus="$build/fuzz-corpus/$target"
  mkdir -p "$corpus"
  seeds="$here/tests/libfuzzer/seeds/${target%_fuzz}"
  echo "== $target, $seconds s at most$([ "$runs" -ge 0 ] && echo ", $runs executions at most")"
  "$exe" -max_total_time="$seconds" -runs="$runs" -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-crashes/$target-" "$corpus" "$seeds" 2>&1 |
    grep -E "^(Done|stat::number_of_executed_units|==|SUMMARY|INFO: seed corpus)" || true
  if ls "$build/fuzz-crashes/$target-"* >/dev/null 2>&1; then
    echo "run-fuzz: $target crashed; inputs in $build/fuzz-crashes" >&2
    exit 1
  fi
done
