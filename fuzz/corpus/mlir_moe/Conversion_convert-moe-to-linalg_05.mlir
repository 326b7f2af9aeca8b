func.func @dispatch_row_tile_dynamic(%x: tensor<?x16xf32>, %ids: tensor<?x2xi32>)
    -> (tensor<?x16xf32>, tensor<5xi32>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 4 row_tile = 4
    : (tensor<?x16xf32>, tensor<?x2xi32>)
      -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<5xi32>)
  return %rows, %off : tensor<?x16xf32>, tensor<5xi32>
}
