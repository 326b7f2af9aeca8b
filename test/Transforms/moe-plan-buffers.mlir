// RUN: moe-opt %s -split-input-file -verify-diagnostics -moe-plan-buffers | FileCheck %s
// RUN: moe-opt %s -split-input-file -verify-diagnostics -moe-plan-buffers -convert-moe-to-runtime \
// RUN:   | FileCheck %s --check-prefix=RUNTIME

// Tests that a prefill dispatch's workspaces follow from its maxima: rows are 64 * 4 + 2 * (2 + 4) =
// 268 bytes (int16 ids, f32 weights); 256 tokens reach at most min(2, 2) ranks (512 rows sent); capacity 512 rows received.
// CHECK-LABEL: func.func @prefill(
// CHECK: moe.ep_dispatch {{.+}} {moe.workspaces = {combine.recv = 131072 : i64, dispatch.recv = 137216 : i64, dispatch.send = 137216 : i64, expert.rows = 131072 : i64}}
// The runtime gets them in moert.h's order: capacity, max_tokens, slots, quantization, ranks,
// send, recv, expert rows, combine.
// RUNTIME-LABEL: func.func @prefill(
// RUNTIME: arith.constant dense<[512, 256, 0, 0, 2, 137216, 137216, 131072, 131072, 0, 0, {{-?[1-9][0-9]*}}]> : tensor<12xi64>
func.func @prefill(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                   %er: tensor<8xi32>) -> tensor<?x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 512 ep = 2 max_tokens = 256
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that the decode layout plans ep * slots = 32 rows each way, whatever the tokens.
// CHECK-LABEL: func.func @decode(
// CHECK: moe.ep_dispatch {{.+}} {moe.workspaces = {combine.recv = 8192 : i64, dispatch.recv = 8576 : i64, dispatch.send = 8576 : i64, expert.rows = 8192 : i64}}
func.func @decode(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                  %er: tensor<8xi32>) -> tensor<?x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 32 ep = 4 max_tokens = 8 slots = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<32x64xf32>, tensor<32x2xi32>, tensor<32x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<32x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that FP8 shrinks the wire rows (256 codes + 2 f32 scales + 4 * 6 = 288 bytes) but not the
// bf16 rows the experts receive (256 * 2); 100 tokens reach min(4, 2) ranks.
// CHECK-LABEL: func.func @quantized(
// CHECK: moe.ep_dispatch {{.+}} {moe.workspaces = {combine.recv = 102400 : i64, dispatch.recv = 57600 : i64, dispatch.send = 57600 : i64, expert.rows = 102400 : i64}}
func.func @quantized(%x: tensor<?x256xbf16>, %ids: tensor<?x4xi32>, %w: tensor<?x4xf32>,
                     %er: tensor<16xi32>) -> tensor<?x256xbf16> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 200 ep = 2 max_tokens = 100
      quantization fp8_e4m3_g128
    : (tensor<?x256xbf16>, tensor<?x4xi32>, tensor<?x4xf32>, tensor<16xi32>)
      -> (tensor<?x256xbf16>, tensor<?x4xi32>, tensor<?x4xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<?x256xbf16>, i64) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// -----

// Tests that a dispatch without declared maxima cannot be sized, by name.
func.func @unbounded(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                     %er: tensor<8xi32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{moe-plan-buffers: cannot size this dispatch's workspaces statically: it needs ep, max_tokens, a static hidden size and a static top-k}}
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 512
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that a dynamic top-k is not multiplied into the workspace sizes (issue 9: kDynamic =
// INT64_MIN became a wrapped size) but named as the reason the dispatch cannot be sized.
func.func @dynamic_top_k(%x: tensor<?x64xf32>, %ids: tensor<?x?xi32>, %w: tensor<?x?xf32>,
                         %er: tensor<8xi32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{moe-plan-buffers: cannot size this dispatch's workspaces statically: it needs ep, max_tokens, a static hidden size and a static top-k}}
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 512 ep = 2 max_tokens = 256
    : (tensor<?x64xf32>, tensor<?x?xi32>, tensor<?x?xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x?xi32>, tensor<?x?xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
