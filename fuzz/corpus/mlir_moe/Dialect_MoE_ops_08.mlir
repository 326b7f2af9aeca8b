func.func @grouped_matmul(%in: tensor<?x64xf32>, %w: tensor<8x32x64xf32>,
                          %re: tensor<?xi32>, %in2: tensor<6x16xbf16>,
                          %w2: tensor<4x8x16xbf16>, %re2: tensor<6xi32>)
    -> (tensor<?x32xf32>, tensor<6x8xbf16>) {
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<?x64xf32>, tensor<8x32x64xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %r2 = moe.grouped_matmul %in2, %w2, %re2
    : (tensor<6x16xbf16>, tensor<4x8x16xbf16>, tensor<6xi32>) -> tensor<6x8xbf16>
  return %r, %r2 : tensor<?x32xf32>, tensor<6x8xbf16>
}
