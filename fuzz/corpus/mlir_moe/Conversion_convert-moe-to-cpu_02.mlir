func.func @gemm_any_order(%rows: tensor<?x64xf32>, %w: tensor<4x32x64xf32>,
                          %re: tensor<?xi32>) -> tensor<?x32xf32> {
  %y = moe.grouped_matmul %rows, %w, %re
    : (tensor<?x64xf32>, tensor<4x32x64xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
