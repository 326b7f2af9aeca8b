func.func @dispatch_c6_padding(%x: tensor<1073741823x1xf32>, %ids: tensor<1073741823x2xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 2 row_tile = 4
    : (tensor<1073741823x1xf32>, tensor<1073741823x2xi32>)
      -> (tensor<?x1xf32>, tensor<?xi32>, tensor<1073741823x2xi32>)
  return
}
