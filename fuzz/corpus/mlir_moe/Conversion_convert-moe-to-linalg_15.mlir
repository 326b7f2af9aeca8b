func.func @route_static_result(%x: tensor<?x16xf32>, %wr: tensor<4x16xf32>)
    -> (tensor<3x2xi32>, tensor<3x2xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<?x16xf32>, tensor<4x16xf32>) -> (tensor<3x2xi32>, tensor<3x2xf32>)
  return %ids, %w : tensor<3x2xi32>, tensor<3x2xf32>
}
