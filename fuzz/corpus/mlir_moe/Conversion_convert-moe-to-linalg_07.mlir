func.func @grouped_matmul_bf16(%in: tensor<6x16xbf16>, %w: tensor<4x8x16xbf16>,
                               %re: tensor<6xi32>) -> tensor<6x8xbf16> {
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<6x16xbf16>, tensor<4x8x16xbf16>, tensor<6xi32>) -> tensor<6x8xbf16>
  return %r : tensor<6x8xbf16>
}
