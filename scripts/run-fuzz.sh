#!/usr/bin/env bash
# Runs each libFuzzer target in BUILD_DIR/tests/libfuzzer for SECONDS, on a corpus that starts
# from tests/libfuzzer/seeds and grows in BUILD_DIR/fuzz-corpus/<target>. A crash stops the
# run with the crashing input saved in BUILD_DIR/fuzz-crashes.
# Usage: scripts/run-fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
build="${1:?usage: $0 BUILD_DIR SECONDS}"
seconds="${2:?usage: $0 BUILD_DIR SECONDS}"
here="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$build/fuzz-crashes"
for target in safetensors_fuzz safetensors_struct_fuzz header_fuzz; do
  exe="$build/tests/libfuzzer/$target"
  corpus="$build/fuzz-corpus/$target"
  mkdir -p "$corpus"
  seeds="$here/tests/libfuzzer/seeds/${target%_fuzz}"
  echo "== $target, $seconds s"
  "$exe" -max_total_time="$seconds" -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-crashes/$target-" "$corpus" "$seeds" 2>&1 |
    grep -E "^(Done|stat::number_of_executed_units|==|SUMMARY|INFO: seed corpus)" || true
  if ls "$build/fuzz-crashes/$target-"* >/dev/null 2>&1; then
    echo "run-fuzz: $target crashed; inputs in $build/fuzz-crashes" >&2
    exit 1
  fi
done
