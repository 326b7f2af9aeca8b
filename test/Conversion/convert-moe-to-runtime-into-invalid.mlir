// RUN: moe-opt %s -split-input-file -verify-diagnostics --convert-moe-to-runtime=into-buffers=true

// Tests that into-buffers needs static received rows.
func.func @dynamic_rows(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                        %er: tensor<8xi32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{convert-moe-to-runtime{into-buffers}: the received rows must be static}}
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 32 ep = 2
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that FP8 codes for the experts are not filled into buffers (the receiver dequantizes).
func.func @fp8_codes(%x: tensor<?x128xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                     %er: tensor<8xi32>, %partial: tensor<32x128xf32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{convert-moe-to-runtime{into-buffers}: FP8 codes for the experts (received_scales) are not filled into buffers}}
  %r, %s, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 32 ep = 2 max_tokens = 16
      quantization fp8_e4m3_g128
    : (tensor<?x128xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<32x128xi8>, tensor<32x1xf32>, tensor<32x2xi32>, tensor<32x2xf32>, i64)
  %y = moe.ep_combine %partial, %h : (tensor<32x128xf32>, i64) -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}
