// REQUIRES: cuda-toolkit
// With a CUDA toolkit (libdevice and ptxas), math functions are linked from
// libdevice and the kernels assemble to cubins.
// RUN: moe-opt %s --moe-cuda-pipeline | FileCheck %s --check-prefix=PTX
// RUN: moe-opt %s '--moe-cuda-pipeline=format=bin' | FileCheck %s --check-prefix=CUBIN

// Tests that libdevice resolves every __nv_ call (exp becomes ex2.approx) and format=bin gives ELF.
// PTX-NOT: .extern .func {{.*}}__nv_
// PTX: gpu.binary @layer_kernel [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">
// PTX-SAME: .target sm_90
// PTX: ex2.approx
// PTX-NOT: .extern .func {{.*}}__nv_

// CUBIN: gpu.binary @layer_kernel [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">
// CUBIN-SAME: bin = "\7FELF
// CUBIN-NOT: assembly =
func.func @layer(%x: tensor<?x16xf32>, %wr: tensor<4x16xf32>,
                 %w13: tensor<4x8x16xf32>, %w2: tensor<4x16x4xf32>)
    -> tensor<?x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2, normalize> activation swiglu
         layout <ep = 1, tp = 1>
       : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>,
          tensor<4x16x4xf32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
