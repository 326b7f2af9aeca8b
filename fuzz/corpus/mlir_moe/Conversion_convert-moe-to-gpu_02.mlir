func.func @dispatch(%x: tensor<?x64xbf16>, %ids: tensor<?x2xi32>)
    -> (tensor<?x64xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8 row_tile = 16
    : (tensor<?x64xbf16>, tensor<?x2xi32>)
      -> (tensor<?x64xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  return %rows, %re, %slot, %off : tensor<?x64xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>
}
