func.func @route_sigmoid_groups_bias(%x: tensor<4x16xbf16>, %wr: tensor<8x16xbf16>, %b: tensor<8xf32>)
    -> (tensor<4x2xi32>, tensor<4x2xf32>) {
  %ids, %w = moe.route %x, %wr bias %b
      routing <sigmoid, top_k = 2, n_group = 4, topk_group = 2, normalize, scale = 2.5, correction_bias>
    : (tensor<4x16xbf16>, tensor<8x16xbf16>, tensor<8xf32>) -> (tensor<4x2xi32>, tensor<4x2xf32>)
  return %ids, %w : tensor<4x2xi32>, tensor<4x2xf32>
}
