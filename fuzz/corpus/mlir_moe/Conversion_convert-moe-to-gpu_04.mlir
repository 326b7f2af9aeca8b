func.func @one_expert(%x: tensor<?x128xbf16>, %rows: tensor<?xi32>, %off: tensor<2xi32>,
                      %w: tensor<1x128x128xbf16>) -> tensor<?x128xbf16> {
  %h = moe.grouped_matmul %x, %w, %rows offsets %off
    : (tensor<?x128xbf16>, tensor<1x128x128xbf16>, tensor<?xi32>, tensor<2xi32>) -> tensor<?x128xbf16>
  return %h : tensor<?x128xbf16>
}
