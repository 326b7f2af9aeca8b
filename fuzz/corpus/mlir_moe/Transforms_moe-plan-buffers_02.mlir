func.func @quantized(%x: tensor<?x256xbf16>, %ids: tensor<?x4xi32>, %w: tensor<?x4xf32>,
                     %er: tensor<16xi32>) -> tensor<?x256xbf16> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 200 ep = 2 max_tokens = 100
      quantization fp8_e4m3_g128
    : (tensor<?x256xbf16>, tensor<?x4xi32>, tensor<?x4xf32>, tensor<16xi32>)
      -> (tensor<?x256xbf16>, tensor<?x4xi32>, tensor<?x4xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<?x256xbf16>, i64) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}
