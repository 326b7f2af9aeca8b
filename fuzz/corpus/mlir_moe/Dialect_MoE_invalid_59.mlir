func.func @gmm_c1_rank(%in: tensor<?x64xf32>, %w: tensor<32x64xf32>, %re: tensor<?xi32>) {
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<?x64xf32>, tensor<32x64xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  return
}
