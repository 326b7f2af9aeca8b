func.func @gemm_bf16_dot(%rows: tensor<?x96xbf16>, %w: tensor<2x32x96xbf16>, %re: tensor<?xi32>,
                         %off: tensor<3xi32>) -> tensor<?x32xbf16> {
  %y = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<?x96xbf16>, tensor<2x32x96xbf16>, tensor<?xi32>, tensor<3xi32>) -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}
