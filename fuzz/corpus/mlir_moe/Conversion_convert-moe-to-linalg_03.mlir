func.func @dispatch_static(%x: tensor<3x16xf32>, %ids: tensor<3x2xi32>)
    -> (tensor<6x16xf32>, tensor<6xi32>, tensor<3x2xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 4
    : (tensor<3x16xf32>, tensor<3x2xi32>)
      -> (tensor<6x16xf32>, tensor<6xi32>, tensor<3x2xi32>)
  return %rows, %re, %slot : tensor<6x16xf32>, tensor<6xi32>, tensor<3x2xi32>
}
