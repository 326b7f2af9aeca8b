func.func @route_c2_hidden(%x: tensor<?x64xf32>, %wr: tensor<8x32xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<?x64xf32>, tensor<8x32xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}
