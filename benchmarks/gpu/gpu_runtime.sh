# Sourced by the run_gpu_*.sh scripts on a GPU machine (CUDA toolkit,
# PyTorch; no MLIR): builds the runtime (libmoert, libmoert_cuda; without
# MPI) from source and puts it first on LD_LIBRARY_PATH.
build=${MOE_GPU_BUILD:-/tmp/moert-gpu}
cmake -S runtime -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMOERT_ENABLE_MPI=OFF -DMOERT_BUILD_TESTS=OFF >"$build.cmake.log" 2>&1 ||
  { cat "$build.cmake.log"; exit 1; }
ninja -C "$build" moert_cuda >/dev/null
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
