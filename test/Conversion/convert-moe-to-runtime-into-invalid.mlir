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
