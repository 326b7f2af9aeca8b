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
source benchmarks/gpu/gpu_runtime.sh
PYTHONUNBUFFERED=1 python3 benchmarks/gpu/gpu_models.py --json "${OUT:-.}/gpu_models.json" "$@"
