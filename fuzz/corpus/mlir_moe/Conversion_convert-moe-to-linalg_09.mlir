func.func @grouped_matmul_f32(%in: tensor<?x64xf32>, %w: tensor<8x32x64xf32>,
                              %re: tensor<?xi32>) -> tensor<?x32xf32> {
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<?x64xf32>, tensor<8x32x64xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  return %r : tensor<?x32xf32>
}
