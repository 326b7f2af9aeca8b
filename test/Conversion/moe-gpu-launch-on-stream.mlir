// RUN: moe-opt %s --moe-gpu-launch-on-stream -verify-diagnostics

// Tests that a launch in a function without a stream argument is an error at the launch.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @k() kernel { gpu.return }
  }
  llvm.func @no_stream() {
    %c1 = llvm.mlir.constant(1 : i64) : i64
    // expected-error @+1 {{moe-gpu-launch-on-stream: a launch in a function without a stream argument}}
    gpu.launch_func @kernels::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) : i64
    llvm.return
  }
}
