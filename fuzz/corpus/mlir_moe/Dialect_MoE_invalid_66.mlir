func.func @gmm_c5(%in: tensor<?x64xf32>, %w: tensor<8x32x64xf32>, %re: tensor<?xi32>,
                  %off: tensor<8xi32>) {
  %r = moe.grouped_matmul %in, %w, %re offsets %off
    : (tensor<?x64xf32>, tensor<8x32x64xf32>, tensor<?xi32>, tensor<8xi32>) -> tensor<?x32xf32>
  return
}
