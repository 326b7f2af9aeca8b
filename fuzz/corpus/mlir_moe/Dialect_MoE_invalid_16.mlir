func.func @route_c5(%x: tensor<?x64xf32>, %wr: tensor<32x64xf32>) {
  %ids, %w = moe.route %x, %wr routing <sigmoid, top_k = 9, n_group = 8, topk_group = 2>
    : (tensor<?x64xf32>, tensor<32x64xf32>) -> (tensor<?x9xi32>, tensor<?x9xf32>)
  return
}
