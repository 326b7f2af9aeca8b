func.func @fp8_weights(%x: tensor<?x256xbf16>, %ids: tensor<?x2xi32>, %w: tensor<8x128x256xi8>,
                       %s: tensor<8x1x2xf32>) -> tensor<?x128xbf16> {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8 row_tile = 16
    : (tensor<?x256xbf16>, tensor<?x2xi32>)
      -> (tensor<?x256xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %h = moe.grouped_matmul %rows, %w, %re weight_scales %s offsets %off {weight_block = array<i64: 128, 128>}
    : (tensor<?x256xbf16>, tensor<8x128x256xi8>, tensor<?xi32>, tensor<8x1x2xf32>, tensor<9xi32>)
      -> tensor<?x128xbf16>
  return %h : tensor<?x128xbf16>
}
