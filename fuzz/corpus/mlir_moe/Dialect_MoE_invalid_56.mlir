func.func @dispatch_c7_row_tile(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 4 capacity = 8 row_tile = 3
    : (tensor<?x64xf32>, tensor<?x2xi32>) -> (tensor<32x64xf32>, tensor<32xi32>, tensor<?x2xi32>)
  return
}
