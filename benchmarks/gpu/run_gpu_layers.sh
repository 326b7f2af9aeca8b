#!/usr/bin/env bash
# On a GPU machine (CUDA toolkit, PyTorch; no MLIR): builds the mgpu* runtime
# (libmoert_cuda) from source, then checks and times the layers that
# build_layers.sh compiled (carried here in benchmarks/gpu/layers).
# Usage: benchmarks/gpu/run_gpu_layers.sh [gpu_layers.py options...]
# Results: a table on stdout and $OUT/gpu_layers.json (or ./gpu_layers.json).
set -euo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/gpu/gpu_runtime.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader || true
PYTHONUNBUFFERED=1 python3 benchmarks/gpu/gpu_layers.py \
  --json "${OUT:-.}/gpu_layers.json" "$@"
