func.func @grouped(%x: tensor<?x128xbf16>, %ids: tensor<?x2xi32>, %w: tensor<8x128x128xbf16>)
    -> tensor<?x128xbf16> {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8 row_tile = 16
    : (tensor<?x128xbf16>, tensor<?x2xi32>)
      -> (tensor<?x128xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %h = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<?x128xbf16>, tensor<8x128x128xbf16>, tensor<?xi32>, tensor<9xi32>) -> tensor<?x128xbf16>
  return %h : tensor<?x128xbf16>
}
