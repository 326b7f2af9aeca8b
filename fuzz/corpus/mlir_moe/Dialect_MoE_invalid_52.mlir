func.func @dispatch_c2_row_tile(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8 row_tile = 4
    : (tensor<4x64xf32>, tensor<4x2xi32>) -> (tensor<8x64xf32>, tensor<8xi32>, tensor<4x2xi32>)
  return
}
