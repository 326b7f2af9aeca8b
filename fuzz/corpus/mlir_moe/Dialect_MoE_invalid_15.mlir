func.func @route_c4(%x: tensor<?x64xf32>, %wr: tensor<10x64xf32>) {
  %ids, %w = moe.route %x, %wr routing <sigmoid, top_k = 2, n_group = 4, topk_group = 2>
    : (tensor<?x64xf32>, tensor<10x64xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}
