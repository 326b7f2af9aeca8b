func.func @gemm_fp8_weights_bf16_dot(%rows: tensor<?x256xbf16>, %w: tensor<2x64x256xi8>,
                                     %s: tensor<2x1x2xf32>, %re: tensor<?xi32>,
                                     %off: tensor<3xi32>) -> tensor<?x64xbf16> {
  %y = moe.grouped_matmul %rows, %w, %re weight_scales %s offsets %off
    {weight_block = array<i64: 64, 128>}
    : (tensor<?x256xbf16>, tensor<2x64x256xi8>, tensor<?xi32>, tensor<2x1x2xf32>,
       tensor<3xi32>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
