// RUN: moe-opt %s --moe-gpu-kernel-registers | FileCheck %s

// A 1024-thread kernel may keep one block resident (64 registers a thread);
// 512-thread kernels, kernels without a known block size and device
// functions are left to ptxas.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    // CHECK-LABEL: gpu.func @wide
    // CHECK-SAME: nvvm.minctasm = 1 : i32
    gpu.func @wide() kernel attributes {known_block_size = array<i32: 1024, 1, 1>} {
      gpu.return
    }
    // CHECK-LABEL: gpu.func @square
    // CHECK-SAME: nvvm.minctasm = 1 : i32
    gpu.func @square() kernel attributes {known_block_size = array<i32: 32, 32, 1>} {
      gpu.return
    }
    // CHECK-LABEL: gpu.func @half
    // CHECK-NOT: minctasm
    gpu.func @half() kernel attributes {known_block_size = array<i32: 512, 1, 1>} {
      gpu.return
    }
    // CHECK-LABEL: gpu.func @unknown
    // CHECK-NOT: minctasm
    gpu.func @unknown() kernel {
      gpu.return
    }
    // CHECK-LABEL: gpu.func @device
    // CHECK-NOT: minctasm
    gpu.func @device() attributes {known_block_size = array<i32: 1024, 1, 1>} {
      gpu.return
    }
  }
}
