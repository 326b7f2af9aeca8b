#!/usr/bin/env bash
# Installs what the build needs (once), then configures and builds incrementally.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MOE_BUILD_DIR:-$root/build}
llvm=/usr/lib/llvm-22

apt_packages=(libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
              libopenmpi-dev openmpi-bin ninja-build cmake g++ libgtest-dev
              python3-psutil libomp-22-dev  # libomp: threads of the compiled layers
              clang-22 libclang-rt-22-dev)  # sanitizer and fuzz builds (build-san/)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! python3 -c 'import numpy, ml_dtypes, pytest' 2>/dev/null; then
  echo "setup: installing numpy ml_dtypes pytest (pip)"
  python3 -m pip install -q numpy ml_dtypes pytest ||
    python3 -m pip install -q --break-system-packages numpy ml_dtypes pytest
fi

# The fidelity tests compare each MoE family with transformers' own block
# (python/tests/test_hf_families.py). The PyPI torch wheel is large: once.
if ! python3 -c 'import torch, transformers, safetensors' 2>/dev/null; then
  echo "setup: installing torch transformers safetensors (pip; large, once)"
  python3 -m pip install -q torch 'transformers>=5' safetensors ||
    python3 -m pip install -q --break-system-packages torch 'transformers>=5' safetensors
fi

# MOE_SETUP_INSTALL_ONLY=1: packages only (utils/sanitize.sh, utils/fuzz.sh).
[ "${MOE_SETUP_INSTALL_ONLY:-0}" = 1 ] && exit 0

if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=$llvm/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=$llvm/bin/lit
fi
cmake --build "$build" -j "$(nproc)" --target all mlir-doc
