func.func @route_c7_shape(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>, %b: tensor<4xf32>) {
  %ids, %w = moe.route %x, %wr bias %b routing <sigmoid, top_k = 2, correction_bias>
    : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<4xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}
