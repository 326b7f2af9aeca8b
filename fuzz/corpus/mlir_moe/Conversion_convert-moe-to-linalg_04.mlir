func.func @dispatch_row_tile(%x: tensor<3x16xf32>, %ids: tensor<3x2xi32>)
    -> (tensor<18x16xf32>, tensor<18xi32>, tensor<3x2xi32>, tensor<5xi32>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 4 row_tile = 4
    : (tensor<3x16xf32>, tensor<3x2xi32>)
      -> (tensor<18x16xf32>, tensor<18xi32>, tensor<3x2xi32>, tensor<5xi32>)
  return %rows, %re, %slot, %off : tensor<18x16xf32>, tensor<18xi32>, tensor<3x2xi32>, tensor<5xi32>
}
