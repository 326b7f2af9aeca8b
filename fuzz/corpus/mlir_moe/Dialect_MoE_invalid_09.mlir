func.func @route_c1(%x: tensor<64xf32>, %wr: tensor<8x64xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<64xf32>, tensor<8x64xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}
