func.func @gemm_fp8_block_scaled(%rows: tensor<?x128xf32>, %w: tensor<4x32x128xi8>,
                                 %s: tensor<4x2x2xf32>, %re: tensor<?xi32>,
                                 %off: tensor<5xi32>) -> tensor<?x32xf32> {
  %y = moe.grouped_matmul %rows, %w, %re weight_scales %s offsets %off
    {weight_block = array<i64: 16, 64>}
    : (tensor<?x128xf32>, tensor<4x32x128xi8>, tensor<?xi32>, tensor<4x2x2xf32>,
       tensor<5xi32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
