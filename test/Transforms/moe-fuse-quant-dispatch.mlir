// RUN: moe-opt %s -split-input-file -moe-fuse-quant-dispatch -verify-diagnostics | FileCheck %s
// RUN: moe-opt %s -split-input-file -moe-fuse-quant-dispatch=scheme=fp8-e4m3-g32-ue8m0 \
// RUN:   -verify-diagnostics | FileCheck %s --check-prefix=UE8M0
// RUN: moe-opt %s -split-input-file -moe-fuse-quant-dispatch -convert-moe-to-runtime \
// RUN:   -verify-diagnostics | FileCheck %s --check-prefix=CALL
// RUN: moe-opt %s -split-input-file -moe-fuse-quant-dispatch="gemm-consumes-fp8=false" \
// RUN:   -verify-diagnostics | FileCheck %s --check-prefix=DEQUANT
// RUN: not moe-opt %s -split-input-file -moe-fuse-quant-dispatch=scheme=int4 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BAD

// Tests that a dispatch with hidden 256 quantizes in its pack step, with either scheme,
// and lowers to the matching runtime entry point; its rows go straight back (no GEMM
// reads them), so they are dequantized on receipt.
// CHECK-LABEL: func.func @fuse(
// CHECK: moe.ep_dispatch {{.+}} capacity = 64 quantization fp8_e4m3_g128 :
// UE8M0-LABEL: func.func @fuse(
// UE8M0: moe.ep_dispatch {{.+}} capacity = 64 quantization fp8_e4m3_g32_ue8m0 :
// CALL-LABEL: func.func @fuse(
// CALL: arith.constant dense<[64, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, {{-?[1-9][0-9]*}}]> : tensor<12xi64>
// CALL: call @moert_ep_dispatch_bf16(
// BAD: error: moe-fuse-quant-dispatch: unknown scheme 'int4'
func.func @fuse(%x: tensor<?x256xbf16>, %ids: tensor<?x4xi32>, %w: tensor<?x4xf32>,
                %rank: tensor<16xi32>) -> tensor<?x256xbf16> {
  %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64
    : (tensor<?x256xbf16>, tensor<?x4xi32>, tensor<?x4xf32>, tensor<16xi32>)
      -> (tensor<?x256xbf16>, tensor<?x4xi32>, tensor<?x4xf32>, i64)
  %y = moe.ep_combine %rx, %h : (tensor<?x256xbf16>, i64) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// -----

// Tests that a hidden size that is not a multiple of the group is left unquantized, with a remark.
// CHECK-LABEL: func.func @odd_hidden(
// CHECK-NOT: quantization
// CALL-LABEL: func.func @odd_hidden(
// CALL: call @moert_ep_dispatch_f32(
func.func @odd_hidden(%x: tensor<?x48xf32>, %ids: tensor<?x4xi32>, %w: tensor<?x4xf32>,
                      %rank: tensor<16xi32>) -> tensor<?x48xf32> {
  // expected-remark @+1 {{not quantized: hidden size 48 is not a multiple of}}
  %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64
    : (tensor<?x48xf32>, tensor<?x4xi32>, tensor<?x4xf32>, tensor<16xi32>)
      -> (tensor<?x48xf32>, tensor<?x4xi32>, tensor<?x4xf32>, i64)
  %y = moe.ep_combine %rx, %h : (tensor<?x48xf32>, i64) -> tensor<?x48xf32>
  return %y : tensor<?x48xf32>
}

// -----

// Tests that received rows feeding the local dispatch and the gate/up GEMM stay FP8: the
// dispatch returns i8 codes and f32 scales (256 / 128 = 2 groups), both are permuted, and the
// GEMM reads them; the down GEMM and the combine are untouched.
// CHECK-LABEL: func.func @experts(
// CHECK: %[[Q:.+]], %[[S:.+]], %[[IDS:.+]], %[[W:.+]], %[[H:.+]] = moe.ep_dispatch {{.+}} quantization fp8_e4m3_g128
// CHECK-SAME: -> (tensor<?x256xi8>, tensor<?x2xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
// CHECK: %[[QR:.+]], %[[RE:.+]], %[[SLOT:.+]] = moe.dispatch %[[Q]], %[[IDS]] num_experts = 4
// CHECK: %[[SR:.+]], %{{.+}}, %{{.+}} = moe.dispatch %[[S]], %[[IDS]] num_experts = 4
// CHECK: %[[G:.+]] = moe.grouped_matmul %[[QR]], %{{.+}}, %[[RE]] scales %[[SR]] :
// CHECK-SAME: (tensor<?x256xi8>, tensor<4x64x256xf32>, tensor<?xi32>, tensor<?x2xf32>) -> tensor<?x64xf32>
// CHECK: moe.grouped_matmul %{{.+}}, %{{.+}}, %[[RE]] :
// CHECK: moe.combine %{{.+}}, %[[SLOT]], %[[W]]
// CHECK: moe.ep_combine %{{.+}}, %[[H]]
// CALL-LABEL: func.func @experts(
// CALL: call @moert_ep_dispatch_fp8_f32(
// CALL-SAME: -> (tensor<?x?xi8>, tensor<?x?xf32>, tensor<?x?xi32>, tensor<?x?xf32>, i64)
// DEQUANT-LABEL: func.func @experts(
// DEQUANT: moe.ep_dispatch {{.+}} quantization fp8_e4m3_g128
// DEQUANT-SAME: -> (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
// DEQUANT-NOT: scales
func.func @experts(%x: tensor<?x256xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                   %rank: tensor<8xi32>, %w13: tensor<4x64x256xf32>,
                   %w2: tensor<4x256x32xf32>) -> tensor<?x256xf32> {
  %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64
    : (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %rows, %re, %slot = moe.dispatch %rx, %rids num_experts = 4
    : (tensor<?x256xf32>, tensor<?x2xi32>) -> (tensor<?x256xf32>, tensor<?xi32>, tensor<?x2xi32>)
  %g = moe.grouped_matmul %rows, %w13, %re
    : (tensor<?x256xf32>, tensor<4x64x256xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %a = moe.activation %g kind swiglu : (tensor<?x64xf32>) -> tensor<?x32xf32>
  %o = moe.grouped_matmul %a, %w2, %re
    : (tensor<?x32xf32>, tensor<4x256x32xf32>, tensor<?xi32>) -> tensor<?x256xf32>
  %c = moe.combine %o, %slot, %rw
    : (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x256xf32>
  %y = moe.ep_combine %c, %h : (tensor<?x256xf32>, i64) -> tensor<?x256xf32>
  return %y : tensor<?x256xf32>
}
