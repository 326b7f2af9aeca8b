func.func @left_alone(%x: tensor<?x64xbf16>, %ids: tensor<?x2xi32>, %w: tensor<8x128x64xbf16>,
                      %xf: tensor<?x64xf32>, %wf: tensor<8x128x64xf32>,
                      %x24: tensor<?x24xbf16>, %w24: tensor<8x128x24xbf16>)
    -> (tensor<?x128xbf16>, tensor<?x128xf32>, tensor<?x128xbf16>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8
    : (tensor<?x64xbf16>, tensor<?x2xi32>)
      -> (tensor<?x64xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %h = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<?x64xbf16>, tensor<8x128x64xbf16>, tensor<?xi32>, tensor<9xi32>) -> tensor<?x128xbf16>
  %rf, %ref, %sf, %of = moe.dispatch %xf, %ids num_experts = 8 row_tile = 16
    : (tensor<?x64xf32>, tensor<?x2xi32>)
      -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %hf = moe.grouped_matmul %rf, %wf, %ref offsets %of
    : (tensor<?x64xf32>, tensor<8x128x64xf32>, tensor<?xi32>, tensor<9xi32>) -> tensor<?x128xf32>
  %r24, %re24, %s24, %o24 = moe.dispatch %x24, %ids num_experts = 8 row_tile = 16
    : (tensor<?x24xbf16>, tensor<?x2xi32>)
      -> (tensor<?x24xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %h24 = moe.grouped_matmul %r24, %w24, %re24 offsets %o24
    : (tensor<?x24xbf16>, tensor<8x128x24xbf16>, tensor<?xi32>, tensor<9xi32>) -> tensor<?x128xbf16>
  return %h, %hf, %h24 : tensor<?x128xbf16>, tensor<?x128xf32>, tensor<?x128xbf16>
}
