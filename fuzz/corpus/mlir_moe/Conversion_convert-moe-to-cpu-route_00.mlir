func.func @route_softmax(%x: tensor<?x16xf32>, %wr: tensor<4x16xf32>)
    -> (tensor<?x2xi32>, tensor<?x2xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2, normalize>
    : (tensor<?x16xf32>, tensor<4x16xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return %ids, %w : tensor<?x2xi32>, tensor<?x2xf32>
}
