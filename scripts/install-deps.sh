#!/usr/bin/env bash
# Installs what lazytrace needs from Debian's packages, and only what is missing.
# Quiet when everything is present. Usage: scripts/install-deps.sh [--bench] [--peers]
set -euo pipefail

pkgs=(g++ cmake ninja-build make libopenblas-dev libgtest-dev libgmock-dev gnuplot-nox)
for arg in "$@"; do
  case "$arg" in
    --bench) pkgs+=(libbenchmark-dev libdnnl-dev ocl-icd-opencl-dev) ;;  # (dnnl's CMake config needs OpenCL)
    --peers) pkgs+=(libbenchmark-dev libtorch-dev) ;;
    --dev) pkgs+=(clang-format ccache graphviz) ;;
    -h|--help) echo "usage: $0 [--bench] [--peers] [--dev]"; exit 0 ;;
    *) echo "install-deps: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; then
  "${sudo_cmd[@]}" apt-get update -q >/dev/null
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
