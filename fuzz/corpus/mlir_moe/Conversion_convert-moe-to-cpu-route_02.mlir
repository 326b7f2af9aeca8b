func.func @route_cast_keep_all_groups(%x: tensor<?x16xf32>, %wr: tensor<4x16xf32>, %b: tensor<4xf32>)
    -> (tensor<5x1xi32>, tensor<5x1xf32>) {
  %ids, %w = moe.route %x, %wr bias %b
      routing <sigmoid, top_k = 1, n_group = 2, topk_group = 2, correction_bias>
    : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4xf32>) -> (tensor<5x1xi32>, tensor<5x1xf32>)
  return %ids, %w : tensor<5x1xi32>, tensor<5x1xf32>
}
