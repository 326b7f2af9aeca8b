#!/usr/bin/env bash
# On a GPU machine with MPI (mpirun and its headers; no MLIR): builds the
# runtime (libmoert with the MPI backend, libmoert_cuda) from source, then
# checks the expert-parallel layers of build_layers.sh on 2 MPI ranks: on
# the mpi backend when they share the GPU, on nccl when each has its own
# (gpu_ep.py --backend auto). Usage: benchmarks/gpu/run_gpu_ep.sh [ranks (default 2)]
# Results: each rank's rows on stdout and in $OUT/gpu_ep.json.rank<r>.
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=${1:-2}
source benchmarks/gpu/gpu_mpi.sh
build=${MOE_GPU_BUILD:-/tmp/moert-gpu-mpi}
cmake -S runtime -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMOERT_ENABLE_MPI=ON -DMOERT_BUILD_TESTS=OFF >"$build.cmake.log" 2>&1 ||
  { cat "$build.cmake.log"; exit 1; }
ninja -C "$build" moert moert_cuda >/dev/null
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PYTHONUNBUFFERED=1 mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
  -x LD_LIBRARY_PATH -x PYTHONUNBUFFERED \
  python3 benchmarks/gpu/gpu_ep.py --json "${OUT:-.}/gpu_ep.json"
