// RUN: moe-opt %s -split-input-file -moe-fuse-quant-dispatch -verify-diagnostics | FileCheck %s
// RUN: moe-opt %s -split-input-file -moe-fuse-quant-dispatch=scheme=fp8-e4m3-g32-ue8m0 \
// RUN:   -verify-diagnostics | FileCheck %s --check-prefix=UE8M0
// RUN: moe-opt %s -split-input-file -moe-fuse-quant-dispatch -convert-moe-to-runtime \
// RUN:   -verify-diagnostics | FileCheck %s --check-prefix=CALL
// RUN: not moe-opt %s -split-input-file -moe-fuse-quant-dispatch=scheme=int4 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BAD

// Tests that a dispatch with hidden 256 quantizes in its pack step, with either scheme,
// and lowers to the matching runtime entry point.
// CHECK-LABEL: func.func @fuse(
// CHECK: moe.ep_dispatch {{.+}} capacity = 64 quantization fp8_e4m3_g128 :
// UE8M0-LABEL: func.func @fuse(
// UE8M0: moe.ep_dispatch {{.+}} capacity = 64 quantization fp8_e4m3_g32_ue8m0 :
// CALL-LABEL: func.func @fuse(
// CALL: arith.constant dense<[64, 0, 0, 1, 0, 0, 0, 0, 0]> : tensor<9xi64>
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
