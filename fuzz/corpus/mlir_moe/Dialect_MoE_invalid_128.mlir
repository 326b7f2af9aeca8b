func.func @dispatch_c6_row_tile(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 4 row_tile = 1025
    : (tensor<?x64xf32>, tensor<?x2xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>)
  return
}
