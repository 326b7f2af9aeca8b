func.func @dispatch_row_tile_zero(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8 row_tile = 0
    : (tensor<?x64xf32>, tensor<?x2xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>)
  return
}
