// RUN: moe-opt %s --moe-gpu-kernel-registers | FileCheck %s

// A 1024-thread kernel may keep one block resident (64 registers a thread). A kernel of at most
// 512 threads without tensor-core products may use 64 registers a thread as well
// (64K / (64 x threads) resident blocks): given only its .maxntid, ptxas aims at a full
// multiprocessor (32 registers a thread for 256 threads) and spills where the kernel needs more.
// A kernel with mma.sync products may use 128 registers a thread (64K / (128 x threads) blocks):
// given only .maxntid 128, ptxas aimed a decode GEMM at 64 and spilled. Kernels with wgmma
// products, kernels without a known block size and device functions are left to ptxas.
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
    // CHECK-SAME: nvvm.minctasm = 2 : i32
    gpu.func @half() kernel attributes {known_block_size = array<i32: 512, 1, 1>} {
      gpu.return
    }
    // CHECK-LABEL: gpu.func @quarter
    // CHECK-SAME: nvvm.minctasm = 4 : i32
    gpu.func @quarter() kernel attributes {known_block_size = array<i32: 256, 1, 1>} {
      gpu.return
    }
    // CHECK-LABEL: gpu.func @mma_sync
    // CHECK-SAME: nvvm.minctasm = 4 : i32
    gpu.func @mma_sync(%a: i32, %b: i32, %c: f32) kernel
        attributes {known_block_size = array<i32: 128, 1, 1>} {
      %d = nvvm.mma.sync A[%a, %a, %a, %a] B[%b, %b] C[%c, %c, %c, %c]
        {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>,
         multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>,
         shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
      gpu.return
    }
    // CHECK-LABEL: gpu.func @wgmma
    // CHECK-NOT: minctasm
    gpu.func @wgmma(%desc: i64, %acc: !llvm.struct<(f32, f32, f32, f32, f32, f32, f32, f32)>) kernel
        attributes {known_block_size = array<i32: 128, 1, 1>} {
      %d = nvvm.wgmma.mma_async %desc, %desc, %acc,
        #nvvm.shape<m = 64, n = 16, k = 16>, D[<f32>, <one>, <wrapped>],
        A[<bf16>, <one>, <row>], B[<bf16>, <one>, <row>]
        : !llvm.struct<(f32, f32, f32, f32, f32, f32, f32, f32)> -> !llvm.struct<(f32, f32, f32, f32, f32, f32, f32, f32)>
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
