// RUN: moe-opt %s -split-input-file -verify-diagnostics '--convert-moe-to-gpu=prefill-mma=wgmma prefill-block=128x128 prefill-stages=3 fp8-rows=true'

// Tests that the FP8 rows form refuses codes whose scales cover 16 of depth: an e4m3 wgmma
// multiplies 32 of depth at once, so a scale must cover whole products (32, 64 or 128).
func.func @codes_in_groups_of_16(%codes: tensor<?x256xi8>, %scales: tensor<?x16xf32>,
                                 %ids: tensor<?x2xi32>, %w: tensor<8x128x256xi8>,
                                 %s: tensor<8x1x2xf32>) -> tensor<?x128xbf16> {
  %rows, %re, %slot, %off = moe.dispatch %codes, %ids num_experts = 8 row_tile = 16
    : (tensor<?x256xi8>, tensor<?x2xi32>)
      -> (tensor<?x256xi8>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %srows, %sre, %sslot, %soff = moe.dispatch %scales, %ids num_experts = 8 row_tile = 16
    : (tensor<?x16xf32>, tensor<?x2xi32>)
      -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  // expected-error @+1 {{convert-moe-to-gpu: the GEMM of an FP8 dispatch's codes needs scales per 8 or more of depth, and per 32, 64 or 128 where the FP8 rows prefill form (fp8-rows) multiplies them}}
  %h = moe.grouped_matmul %rows, %w, %re scales %srows weight_scales %s offsets %off {weight_block = array<i64: 128, 128>}
    : (tensor<?x256xi8>, tensor<8x128x256xi8>, tensor<?xi32>, tensor<?x16xf32>, tensor<8x1x2xf32>, tensor<9xi32>)
      -> tensor<?x128xbf16>
  return %h : tensor<?x128xbf16>
}
