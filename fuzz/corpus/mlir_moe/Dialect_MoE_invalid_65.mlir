func.func @gmm_c3_element(%in: tensor<6x64xbf16>, %w: tensor<8x32x64xbf16>, %re: tensor<6xi32>) {
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<6x64xbf16>, tensor<8x32x64xbf16>, tensor<6xi32>) -> tensor<6x32xf32>
  return
}
