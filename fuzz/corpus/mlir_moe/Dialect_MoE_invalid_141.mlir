func.func @layer_c13(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                     %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <sigmoid, top_k = 2> activation swiglu score_input layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>) -> tensor<?x64xf32>
  return
}
