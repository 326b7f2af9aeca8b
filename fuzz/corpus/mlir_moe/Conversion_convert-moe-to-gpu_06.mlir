func.func @fp8_blocks_left_alone(%x: tensor<?x256xbf16>, %ids: tensor<?x2xi32>,
                                 %w: tensor<8x128x256xi8>, %s16: tensor<8x8x2xf32>,
                                 %s8: tensor<8x1x32xf32>) -> (tensor<?x128xbf16>, tensor<?x128xbf16>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8 row_tile = 16
    : (tensor<?x256xbf16>, tensor<?x2xi32>)
      -> (tensor<?x256xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %a = moe.grouped_matmul %rows, %w, %re weight_scales %s16 offsets %off {weight_block = array<i64: 16, 128>}
    : (tensor<?x256xbf16>, tensor<8x128x256xi8>, tensor<?xi32>, tensor<8x8x2xf32>, tensor<9xi32>)
      -> tensor<?x128xbf16>
  %b = moe.grouped_matmul %rows, %w, %re weight_scales %s8 offsets %off {weight_block = array<i64: 128, 8>}
    : (tensor<?x256xbf16>, tensor<8x128x256xi8>, tensor<?xi32>, tensor<8x1x32xf32>, tensor<9xi32>)
      -> tensor<?x128xbf16>
  return %a, %b : tensor<?x128xbf16>, tensor<?x128xbf16>
}
