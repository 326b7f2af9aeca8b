#!/usr/bin/env bash
# On a GPU machine (CUDA toolkit, PyTorch; no MLIR): builds the runtime
# (libmoert, libmoert_cuda; without MPI) from source, then checks the models
# that build_models.sh compiled (carried here in benchmarks/gpu/models)
# through moec's CUDA layers (gpu_models.py). The runtimes built here come
# first on LD_LIBRARY_PATH: the copies inside each model directory were
# linked against the compiling machine's OpenMPI and NCCL.
# Usage: benchmarks/gpu/run_gpu_models.sh [gpu_models.py options...]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${MOE_GPU_BUILD:-/tmp/moert-gpu}
cmake -S runtime -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMOERT_ENABLE_MPI=OFF -DMOERT_BUILD_TESTS=OFF >"$build.cmake.log" 2>&1 ||
  { cat "$build.cmake.log"; exit 1; }
ninja -C "$build" moert_cuda >/dev/null
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PYTHONUNBUFFERED=1 python3 benchmarks/gpu/gpu_models.py --json "${OUT:-.}/gpu_models.json" "$@"
