func.func @gmm_c1_k(%in: tensor<?x64xf32>, %w: tensor<8x64x32xf32>, %re: tensor<?xi32>) {
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<?x64xf32>, tensor<8x64x32xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}
