// RUN: moe-opt %s --convert-moe-to-gpu | FileCheck %s

// Tests that every kernel of an op marked moe.side_stream (the shared expert's GEMMs, both forms,
// and its activation) is named moe_side_stream, which moe-gpu-side-stream puts on the side
// stream, and that the kernels of unmarked ops keep their own names.
// CHECK-LABEL: func.func @shared
// CHECK-COUNT-2: gpu.launch {{.+}} function(@moe_side_stream)
// CHECK-NOT: gpu.launch {{.+}} function(
// CHECK: gpu.launch {{.+}} function(@moe_side_stream)
// CHECK-NOT: gpu.launch {{.+}} function(
// CHECK-COUNT-2: gpu.launch {{.+}} function(@moe_side_stream)
// CHECK-NOT: function(@moe_side_stream)
// CHECK: gpu.launch
// CHECK-NOT: function(@moe_side_stream)
// CHECK: return
func.func @shared(%x: tensor<?x256xbf16>, %re: tensor<?xi32>, %off: tensor<2xi32>,
                  %w13: tensor<1x512x256xbf16>, %w2: tensor<1x256x256xbf16>,
                  %w: tensor<1x256x256xbf16>) -> (tensor<?x256xbf16>, tensor<?x256xbf16>) {
  %h = moe.grouped_matmul %x, %w13, %re offsets %off {moe.side_stream}
    : (tensor<?x256xbf16>, tensor<1x512x256xbf16>, tensor<?xi32>, tensor<2xi32>) -> tensor<?x512xbf16>
  %a = moe.activation %h kind swiglu {moe.side_stream} : (tensor<?x512xbf16>) -> tensor<?x256xbf16>
  %o = moe.grouped_matmul %a, %w2, %re offsets %off {moe.side_stream}
    : (tensor<?x256xbf16>, tensor<1x256x256xbf16>, tensor<?xi32>, tensor<2xi32>) -> tensor<?x256xbf16>
  %m = moe.grouped_matmul %x, %w, %re offsets %off
    : (tensor<?x256xbf16>, tensor<1x256x256xbf16>, tensor<?xi32>, tensor<2xi32>) -> tensor<?x256xbf16>
  return %o, %m : tensor<?x256xbf16>, tensor<?x256xbf16>
}
