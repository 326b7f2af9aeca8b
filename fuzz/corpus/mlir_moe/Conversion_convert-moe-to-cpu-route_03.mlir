func.func @route_group_max(%x: tensor<4x16xf32>, %wr: tensor<8x16xf32>)
    -> (tensor<4x3xi32>, tensor<4x3xf32>) {
  %ids, %w = moe.route %x, %wr
      routing <softmax, top_k = 3, n_group = 4, topk_group = 2, group_max>
    : (tensor<4x16xf32>, tensor<8x16xf32>) -> (tensor<4x3xi32>, tensor<4x3xf32>)
  return %ids, %w : tensor<4x3xi32>, tensor<4x3xf32>
}
