func.func @gemm_fp8_weights(%rows: tensor<?x64xf32>, %w: tensor<4x32x64xi8>,
                            %re: tensor<?xi32>, %s: tensor<4x2x2xf32>) -> tensor<?x32xf32> {
  %y = moe.grouped_matmul %rows, %w, %re weight_scales %s {weight_block = array<i64: 16, 32>}
    : (tensor<?x64xf32>, tensor<4x32x64xi8>, tensor<?xi32>, tensor<4x2x2xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
