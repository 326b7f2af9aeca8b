func.func @gmm_c2(%in: tensor<6x64xf32>, %w: tensor<8x32x64xf32>, %re: tensor<5xi32>) {
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<6x64xf32>, tensor<8x32x64xf32>, tensor<5xi32>) -> tensor<6x32xf32>
  return
}
