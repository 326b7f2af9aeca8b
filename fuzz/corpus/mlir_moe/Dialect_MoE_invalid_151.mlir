func.func @route_c10(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>, %rb: tensor<2x4xf32>) {
  %ids, %w = moe.route %x, %wr logit_bias %rb routing <softmax, top_k = 2>
      : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<2x4xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}
