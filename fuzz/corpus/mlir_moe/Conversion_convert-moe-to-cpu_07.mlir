func.func @gemm_fp8_bf16_rows(%rows: tensor<?x128xbf16>, %w: tensor<4x32x128xi8>,
                              %s: tensor<4x2x2xf32>, %re: tensor<?xi32>,
                              %off: tensor<5xi32>) -> tensor<?x32xbf16> {
  %y = moe.grouped_matmul %rows, %w, %re weight_scales %s offsets %off
    {weight_block = array<i64: 16, 64>}
    : (tensor<?x128xbf16>, tensor<4x32x128xi8>, tensor<?xi32>, tensor<4x2x2xf32>,
       tensor<5xi32>) -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}
