func.func @route_c9_hidden(%x: tensor<?x2097152xf32>, %wr: tensor<8x2097152xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<?x2097152xf32>, tensor<8x2097152xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}
