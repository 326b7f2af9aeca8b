func.func @gemm_ragged_depth(%rows: tensor<?x76xf32>, %w: tensor<4x32x76xf32>,
                             %re: tensor<?xi32>, %off: tensor<5xi32>) -> tensor<?x32xf32> {
  %y = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<?x76xf32>, tensor<4x32x76xf32>, tensor<?xi32>, tensor<5xi32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
