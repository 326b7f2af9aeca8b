func.func @zero_tokens(%x: tensor<0x16xbf16>, %wr: tensor<4x16xbf16>, %w13: tensor<4x8x16xbf16>,
                       %w2: tensor<4x16x4xbf16>) -> tensor<0x16xbf16> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 4, normalize> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<0x16xbf16>, tensor<4x16xbf16>, tensor<4x8x16xbf16>, tensor<4x16x4xbf16>)
         -> tensor<0x16xbf16>
  return %y : tensor<0x16xbf16>
}
