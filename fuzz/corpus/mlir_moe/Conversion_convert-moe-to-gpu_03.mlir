func.func @route(%x: tensor<?x128xbf16>, %w: tensor<64x128xbf16>, %bias: tensor<64xf32>)
    -> (tensor<?x4xi32>, tensor<?x4xf32>) {
  %ids, %weights = moe.route %x, %w bias %bias
    routing <sigmoid, top_k = 4, n_group = 8, topk_group = 4, normalize, scale = 2.5, correction_bias>
    : (tensor<?x128xbf16>, tensor<64x128xbf16>, tensor<64xf32>) -> (tensor<?x4xi32>, tensor<?x4xf32>)
  return %ids, %weights : tensor<?x4xi32>, tensor<?x4xf32>
}
