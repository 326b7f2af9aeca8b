// RUN: moe-opt %s -split-input-file -verify-diagnostics --convert-moe-to-runtime="into-buffers=true all-gather-slots=true"

// Tests that a static token count over the slots is an error, not an out-of-bounds slice.
func.func @over_slots(%x: tensor<6x64xf32>, %ids: tensor<6x2xi32>, %w: tensor<6x2xf32>,
                      %er: tensor<8xi32>) -> tensor<6x64xf32> {
  // expected-error @+1 {{convert-moe-to-runtime{all-gather-slots}: 6 tokens do not fit the 4 slots of a rank's block}}
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8 ep = 2 max_tokens = 4
      slots = 4
    : (tensor<6x64xf32>, tensor<6x2xi32>, tensor<6x2xf32>, tensor<8xi32>)
      -> (tensor<8x64xf32>, tensor<8x2xi32>, tensor<8x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<8x64xf32>, i64) -> tensor<6x64xf32>
  return %y : tensor<6x64xf32>
}
