func.func @route_c9(%x: tensor<4294967296x64xf32>, %wr: tensor<8x64xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<4294967296x64xf32>, tensor<8x64xf32>) -> (tensor<4294967296x2xi32>, tensor<4294967296x2xf32>)
  return
}
