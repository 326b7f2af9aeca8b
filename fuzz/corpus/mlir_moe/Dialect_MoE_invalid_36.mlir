func.func @layer_c4_shared(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>,
                           %w13: tensor<8x64x64xbf16>, %w2: tensor<8x64x32xbf16>,
                           %s13: tensor<64x64xbf16>, %s2: tensor<64x32xf32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) shared(%s13, %s2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8x64x64xbf16>,
          tensor<8x64x32xbf16>, tensor<64x64xbf16>, tensor<64x32xf32>)
         -> tensor<?x64xbf16>
  return
}
