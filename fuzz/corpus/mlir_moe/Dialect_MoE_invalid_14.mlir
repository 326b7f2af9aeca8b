func.func @route_c3(%x: tensor<?x64xf32>, %wr: tensor<4x64xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 5>
    : (tensor<?x64xf32>, tensor<4x64xf32>) -> (tensor<?x5xi32>, tensor<?x5xf32>)
  return
}
