#!/usr/bin/env bash
# Installs what lazytrace needs, and only what is missing: Debian's packages with apt-get,
# then the Python package's build and test needs from PyPI into the project's virtual
# environment (.venv, or $VENV). Quiet when everything is present.
# Usage: scripts/install-deps.sh [--bench] [--peers] [--dev]
set -euo pipefail
cd "$(dirname "$0")/.."

# (libdnnl-dev and libxsmm-dev: product kernels the CPU backend picks among beside OpenBLAS;
# libxbyak-dev: the fused elementwise steps' native code)
pkgs=(g++ cmake ninja-build make libopenblas-dev libdnnl-dev libxsmm-dev libxbyak-dev libgtest-dev libgmock-dev
      openmpi-bin libopenmpi-dev
      gnuplot-nox python3 python3-venv python3-dev)
python_pkgs=(nanobind numpy pytest safetensors)
bench_venv=0
peers_venv=0
for arg in "$@"; do
  case "$arg" in
    --bench) pkgs+=(libbenchmark-dev) ;;
    --bench-python) pkgs+=(python3-torch python3-numpy); bench_venv=1 ;;  # PyTorch eager beside it
    --peers) pkgs+=(libbenchmark-dev libtorch-dev); peers_venv=1 ;;  # and .venv-peers (PyPI)
    --dev) pkgs+=(clang-format ccache graphviz) ;;
    -h|--help) echo "usage: $0 [--bench] [--bench-python] [--peers] [--dev]"; exit 0 ;;
    *) echo "install-deps: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

python_deps() {
  local venv=${VENV:-.venv} mods
  mods=$(printf '%s,' "${python_pkgs[@]}" | sed 's/,$//')
  if [ ! -x "$venv/bin/python" ]; then
    echo "install-deps: making the virtual environment $venv"
    python3 -m venv "$venv"
  fi
  if ! "$venv/bin/python" -c "import ${mods}" 2>/dev/null; then
    echo "install-deps: installing ${python_pkgs[*]} into $venv (PyPI)"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "${python_pkgs[@]}"
  fi
}

# the Python benchmark's environment: Debian's Python, which sees Debian's python3-torch
bench_deps() {
  [ "$bench_venv" = 1 ] || return 0
  if [ ! -x .venv-bench/bin/python ]; then
    echo "install-deps: making .venv-bench (Debian's python3, with its site packages)"
    /usr/bin/python3 -m venv --system-site-packages .venv-bench
  fi
  .venv-bench/bin/python -c "import nanobind" 2>/dev/null ||
    .venv-bench/bin/python -m pip install -q --disable-pip-version-check nanobind
}

# the peers of `make bench-peers`, from PyPI: PyTorch 2 (eager, torch.compile), JAX and optax,
# in their own environment (the project's interpreter, so lazytrace's build imports there
# too), and torch_xla in another
peer_pkgs=(torch jax optax numpy safetensors)
xla_pkgs=(torch==2.9.0 torch_xla==2.9.0 jax==0.7.1 jaxlib==0.7.1 torchax==0.0.12 flax==0.11.2 numpy)
peers_deps() {
  [ "$peers_venv" = 1 ] || return 0
  local py
  py=$(readlink -f "${VENV:-.venv}/bin/python")
  if [ ! -x .venv-peers/bin/python ]; then
    echo "install-deps: making .venv-peers"
    "$py" -m venv .venv-peers
  fi
  .venv-peers/bin/python -c "import torch, jax, optax, numpy, safetensors" 2>/dev/null || {
    echo "install-deps: installing ${peer_pkgs[*]} into .venv-peers (PyPI; PyTorch is large)"
    .venv-peers/bin/python -m pip install -q --disable-pip-version-check "${peer_pkgs[@]}"
  }
  # torch_xla pins its PyTorch, and its assume_pure needs JAX (through torchax): its own
  # environment; a failed install leaves its rows out of the benchmark (torchax imports flax,
  # which it does not declare)
  if [ ! -x .venv-xla/bin/python ]; then
    echo "install-deps: making .venv-xla"
    "$py" -m venv .venv-xla
  fi
  .venv-xla/bin/python -c "import torch_xla, torchax, jax" 2>/dev/null || {
    echo "install-deps: installing ${xla_pkgs[*]} into .venv-xla (PyPI)"
    .venv-xla/bin/python -m pip install -q --disable-pip-version-check "${xla_pkgs[@]}" ||
      echo "install-deps: torch_xla did not install; bench-peers leaves it out" >&2
  }
}

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  python_deps
  bench_deps
  peers_deps
  exit 0
fi

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
python_deps
bench_deps
peers_deps
