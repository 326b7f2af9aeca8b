func.func @gmm_c1_element(%in: tensor<?x64xf32>, %w: tensor<8x32x64xbf16>, %re: tensor<?xi32>) {
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<?x64xf32>, tensor<8x32x64xbf16>, tensor<?xi32>) -> tensor<?x32xf32>
  return
}
