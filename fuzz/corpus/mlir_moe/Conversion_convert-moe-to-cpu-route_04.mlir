func.func @route_logits_bf16(%x: tensor<4x16xbf16>, %wr: tensor<8x16xbf16>)
    -> (tensor<4x2xi32>, tensor<4x2xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2, normalize, logits_bf16>
    : (tensor<4x16xbf16>, tensor<8x16xbf16>) -> (tensor<4x2xi32>, tensor<4x2xf32>)
  return %ids, %w : tensor<4x2xi32>, tensor<4x2xf32>
}
