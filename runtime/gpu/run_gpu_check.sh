#!/usr/bin/env bash
# Builds the runtime on its own and checks the NCCL backend's collectives on
# one rank. For a machine with a GPU, CUDA and NCCL (/usr/local/cuda) and MPI.
# Usage: runtime/gpu/run_gpu_check.sh [build-dir]   (default: build-gpu)
set -euo pipefail

cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
source benchmarks/gpu/gpu_mpi.sh

cmake -S runtime -B "$build" -G Ninja
ninja -C "$build"
if [[ ! -x "$build/moert-gpu-check" ]]; then
  echo "moert-gpu-check was not built: CUDA or NCCL not found (see cmake output)" >&2
  exit 1
fi
nvidia-smi -L || true
# MOERT_NCCL_CAPTURE=1: the check also captures the C API's exchange into
# a CUDA graph.
MOERT_TIMEOUT_MS=${MOERT_TIMEOUT_MS:-30000} MOERT_NCCL_CAPTURE=1 \
  mpirun -np 1 --allow-run-as-root "$build/moert-gpu-check"
