func.func @layer_c4_f16(%x: tensor<?x64xf16>, %wr: tensor<8x64xf16>,
                        %w13: tensor<8x64x64xf16>, %w2: tensor<8x64x32xf16>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf16>, tensor<8x64xf16>, tensor<8x64x64xf16>,
          tensor<8x64x32xf16>) -> tensor<?x64xf16>
  return
}
