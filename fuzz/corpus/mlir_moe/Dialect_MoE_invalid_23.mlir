func.func @route_c8_weights(%x: tensor<4x64xf32>, %wr: tensor<8x64xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<4x64xf32>, tensor<8x64xf32>) -> (tensor<4x2xi32>, tensor<5x2xf32>)
  return
}
