// RUN: moe-opt %s -split-input-file -verify-diagnostics '--convert-moe-to-gpu=prefill-mma=wgmma prefill-block=128x128 prefill-stages=3'

// Tests that a GEMM of an FP8 dispatch's codes is refused by name where no form of it reads codes:
// FP8 weights whose wgmma prefill form stages bf16 rows (no fp8-rows).
func.func @codes_without_fp8_rows(%codes: tensor<?x256xi8>, %scales: tensor<?x2xf32>,
                                  %ids: tensor<?x2xi32>, %w: tensor<8x128x256xi8>,
                                  %s: tensor<8x1x2xf32>) -> tensor<?x128xbf16> {
  %rows, %re, %slot, %off = moe.dispatch %codes, %ids num_experts = 8 row_tile = 16
    : (tensor<?x256xi8>, tensor<?x2xi32>)
      -> (tensor<?x256xi8>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %srows, %sre, %sslot, %soff = moe.dispatch %scales, %ids num_experts = 8 row_tile = 16
    : (tensor<?x2xf32>, tensor<?x2xi32>)
      -> (tensor<?x2xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  // expected-error @+1 {{convert-moe-to-gpu: the GEMM of an FP8 dispatch's codes needs FP8 weights kept as codes, and for its prefill form fp8-rows with wgmma blocks and scales per 32, 64 or 128 of depth; else dequantize on receipt (moe-fuse-quant-dispatch{gemm-consumes-fp8=false})}}
  %h = moe.grouped_matmul %rows, %w, %re scales %srows weight_scales %s offsets %off {weight_block = array<i64: 128, 128>}
    : (tensor<?x256xi8>, tensor<8x128x256xi8>, tensor<?xi32>, tensor<?x2xf32>, tensor<8x1x2xf32>, tensor<9xi32>)
      -> tensor<?x128xbf16>
  return %h : tensor<?x128xbf16>
}

// -----

// Tests the same refusal for bf16 weights: no form of their GEMM reads codes.
func.func @codes_with_bf16_weights(%codes: tensor<?x256xi8>, %scales: tensor<?x2xf32>,
                                   %ids: tensor<?x2xi32>, %w: tensor<8x128x256xbf16>)
    -> tensor<?x128xbf16> {
  %rows, %re, %slot, %off = moe.dispatch %codes, %ids num_experts = 8 row_tile = 16
    : (tensor<?x256xi8>, tensor<?x2xi32>)
      -> (tensor<?x256xi8>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %srows, %sre, %sslot, %soff = moe.dispatch %scales, %ids num_experts = 8 row_tile = 16
    : (tensor<?x2xf32>, tensor<?x2xi32>)
      -> (tensor<?x2xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  // expected-error @+1 {{convert-moe-to-gpu: the GEMM of an FP8 dispatch's codes needs FP8 weights}}
  %h = moe.grouped_matmul %rows, %w, %re scales %srows offsets %off
    : (tensor<?x256xi8>, tensor<8x128x256xbf16>, tensor<?xi32>, tensor<?x2xf32>, tensor<9xi32>)
      -> tensor<?x128xbf16>
  return %h : tensor<?x128xbf16>
}
