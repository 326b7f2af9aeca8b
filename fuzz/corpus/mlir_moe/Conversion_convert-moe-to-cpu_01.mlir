func.func @gemm_bf16(%rows: tensor<?x20xbf16>, %w: tensor<2x8x20xbf16>, %re: tensor<?xi32>,
                     %off: tensor<3xi32>) -> tensor<?x8xbf16> {
  %y = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<?x20xbf16>, tensor<2x8x20xbf16>, tensor<?xi32>, tensor<3xi32>) -> tensor<?x8xbf16>
  return %y : tensor<?x8xbf16>
}
