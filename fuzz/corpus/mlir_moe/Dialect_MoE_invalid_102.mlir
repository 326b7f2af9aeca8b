func.func @routing_field_twice(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2, top_k = 3>
    : (tensor<?x64xf32>, tensor<8x64xf32>) -> (tensor<?x3xi32>, tensor<?x3xf32>)
  return
}
