func.func @layer_c15_type(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>,
                          %w13: tensor<8x64x64xbf16>, %w2: tensor<8x64x32xbf16>,
                          %b13: tensor<8x64xf32>, %b2: tensor<8x64xf32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2 biases(%b13, %b2))
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8x64x64xbf16>, tensor<8x64x32xbf16>,
          tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<?x64xbf16>
  return
}
