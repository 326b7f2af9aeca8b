func.func @route_sigmoid_groups_bias(%x: tensor<4x64xbf16>,
                                     %wr: tensor<32x64xbf16>, %b: tensor<32xf32>)
    -> (tensor<4x8xi32>, tensor<4x8xf32>) {
  %ids, %w = moe.route %x, %wr bias %b
      routing <sigmoid, top_k = 8, n_group = 8, topk_group = 4, normalize,
               scale = 2.5, correction_bias>
    : (tensor<4x64xbf16>, tensor<32x64xbf16>, tensor<32xf32>)
      -> (tensor<4x8xi32>, tensor<4x8xf32>)
  return %ids, %w : tensor<4x8xi32>, tensor<4x8xf32>
}
