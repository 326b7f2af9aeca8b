// RUN: moe-opt %s -split-input-file --moe-gpu-router-matmul | FileCheck %s

#x = affine_map<(t, e, k) -> (t, k)>
#w = affine_map<(t, e, k) -> (e, k)>
#o = affine_map<(t, e, k) -> (t, e)>

// Tests that the router's logits GEMM (bf16 x and w, f32 sums into zeros) becomes the tensor-core
// kernel with f32 stores, in its decode and prefill forms. Without experts the decode form has
// 16 warps a block over the depth (256 = 8 warps x 32 here, the most that divide) and 8 columns
// a block (64 / 8 blocks leave few warps).
// CHECK-LABEL: func.func @logits
// CHECK-NOT: linalg.generic
// CHECK: scf.if
// CHECK: gpu.launch {{.+}} threads({{.+}}) in (%{{.+}} = %c256{{.*}}) workgroup(%[[SMEM:.+]] : memref<8x16x8xf32, #gpu.address_space<workgroup>>)
// CHECK: vector.load {{.+}} {alignment = 16 : i64} : memref<?x256xbf16, {{.+}}>, vector<8xbf16>
// CHECK: nvvm.mma.sync
// CHECK: gpu.barrier
// CHECK: memref.store %{{.+}}, %{{.+}} : memref<?x64xf32>
// CHECK: } else {
// CHECK: gpu.launch
// CHECK: nvvm.mma.sync
func.func @logits(%x: tensor<?x256xbf16>, %w: tensor<64x256xbf16>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %t = tensor.dim %x, %c0 : tensor<?x256xbf16>
  %e = tensor.empty(%t) : tensor<?x64xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<?x64xf32>) -> tensor<?x64xf32>
  %l = linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<?x256xbf16>, tensor<64x256xbf16>) outs(%z : tensor<?x64xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %i = linalg.index 0 : index
    %af = arith.extf %a : bf16 to f32
    %bf = arith.extf %b : bf16 to f32
    %p = arith.mulf %af, %bf : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<?x64xf32>
  return %l : tensor<?x64xf32>
}

// -----

#x = affine_map<(t, e, k) -> (t, k)>
#w = affine_map<(t, e, k) -> (e, k)>
#o = affine_map<(t, e, k) -> (t, e)>

// Tests that a sum into a non-zero start (a bias) is left to the loops.
// CHECK-LABEL: func.func @into_bias
// CHECK: linalg.generic
// CHECK-NOT: gpu.launch
func.func @into_bias(%x: tensor<?x256xbf16>, %w: tensor<64x256xbf16>, %bias: tensor<?x64xf32>)
    -> tensor<?x64xf32> {
  %l = linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<?x256xbf16>, tensor<64x256xbf16>) outs(%bias : tensor<?x64xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %af = arith.extf %a : bf16 to f32
    %bf = arith.extf %b : bf16 to f32
    %p = arith.mulf %af, %bf : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<?x64xf32>
  return %l : tensor<?x64xf32>
}
