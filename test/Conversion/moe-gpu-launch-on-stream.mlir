// RUN: moe-opt %s -split-input-file --moe-gpu-launch-on-stream -verify-diagnostics | FileCheck %s

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

// -----

// Tests that kernels named moe_side_stream go on the side stream that moe-gpu-side-stream got
// (the result of moertGpuSideStream), the others on the entry's stream.
// CHECK-LABEL: llvm.func @two_streams(
// CHECK-SAME: %[[S:[^:]+]]: !llvm.ptr {moe.gpu_stream})
// CHECK: %[[SIDE:.+]] = llvm.call @moertGpuSideStream(%[[S]])
// CHECK: gpu.launch_func <%[[SIDE]] : !llvm.ptr> @moe_side_stream::@moe_side_stream
// CHECK: gpu.launch_func <%[[S]] : !llvm.ptr> @kernels::@k
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @k() kernel { gpu.return }
  }
  gpu.module @moe_side_stream {
    gpu.func @moe_side_stream() kernel { gpu.return }
  }
  llvm.func @moertGpuSideStream(!llvm.ptr) -> !llvm.ptr
  llvm.func @two_streams(%s: !llvm.ptr {moe.gpu_stream}) {
    %side = llvm.call @moertGpuSideStream(%s) : (!llvm.ptr) -> !llvm.ptr
    %c1 = llvm.mlir.constant(1 : i64) : i64
    gpu.launch_func @moe_side_stream::@moe_side_stream blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) : i64
    gpu.launch_func @kernels::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) : i64
    llvm.return
  }
}

// -----

// Tests that a side-stream kernel without moe-gpu-side-stream's side stream is an error.
module attributes {gpu.container_module} {
  gpu.module @moe_side_stream {
    gpu.func @moe_side_stream() kernel { gpu.return }
  }
  llvm.func @no_side(%s: !llvm.ptr {moe.gpu_stream}) {
    %c1 = llvm.mlir.constant(1 : i64) : i64
    // expected-error @+1 {{moe-gpu-launch-on-stream: a side-stream kernel in a function without a side stream}}
    gpu.launch_func @moe_side_stream::@moe_side_stream blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) : i64
    llvm.return
  }
}
