// RUN: moe-opt %s -split-input-file -verify-diagnostics --convert-moe-to-runtime="into-buffers=true pack-in-layer=true"

// Tests that a dispatch without the group's size is refused: the packing groups rows by rank.
func.func @no_ep(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                 %er: tensor<8xi32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{convert-moe-to-runtime{pack-in-layer}: the received rows and hidden size must be static and the group's size (ep) known, got 'tensor<32x64xf32>'}}
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 32 max_tokens = 16
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<32x64xf32>, tensor<32x2xi32>, tensor<32x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<32x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
