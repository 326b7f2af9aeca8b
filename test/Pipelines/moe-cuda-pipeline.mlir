// Compile-only (PTX, no GPU needed): layers the verifier accepts lower through the CUDA pipeline.
// RUN: moe-opt %s -split-input-file --verify-each --moe-cuda-pipeline \
// RUN:   | FileCheck %s --implicit-check-not='{{moe\.[a-z_]+ }}' --implicit-check-not=linalg. \
// RUN:       --implicit-check-not=tensor.

// Tests that a static 0-token bf16 layer lowers to kernels (issue 9: the SwiGLU column slices of
// an empty tensor failed "offset 0 is out-of-bounds").
// CHECK-LABEL: module attributes {gpu.container_module}
// CHECK: llvm.func @zero_tokens(
// CHECK: gpu.binary
func.func @zero_tokens(%x: tensor<0x16xbf16>, %wr: tensor<4x16xbf16>, %w13: tensor<4x8x16xbf16>,
                       %w2: tensor<4x16x4xbf16>) -> tensor<0x16xbf16> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 4, normalize> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<0x16xbf16>, tensor<4x16xbf16>, tensor<4x8x16xbf16>, tensor<4x16x4xbf16>)
         -> tensor<0x16xbf16>
  return %y : tensor<0x16xbf16>
}

// -----

// Tests that a decode layer whose static token count fits max_tokens_per_rank lowers (layer_c10
// rejects one above it).
// CHECK-LABEL: module attributes {gpu.container_module}
// CHECK: llvm.func @decode_static(
// CHECK: gpu.binary
func.func @decode_static(%x: tensor<3x16xf32>, %wr: tensor<4x16xf32>, %w13: tensor<4x8x16xf32>,
                         %w2: tensor<4x16x4xf32>) -> tensor<3x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
         {max_tokens_per_rank = 4 : i64, phase = #moe<phase decode>}
       : (tensor<3x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>, tensor<4x16x4xf32>)
         -> tensor<3x16xf32>
  return %y : tensor<3x16xf32>
}
