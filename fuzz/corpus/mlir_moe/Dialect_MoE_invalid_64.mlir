func.func @gmm_c3_shape(%in: tensor<6x64xf32>, %w: tensor<8x32x64xf32>, %re: tensor<6xi32>) {
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<6x64xf32>, tensor<8x32x64xf32>, tensor<6xi32>) -> tensor<6x64xf32>
  return
}
