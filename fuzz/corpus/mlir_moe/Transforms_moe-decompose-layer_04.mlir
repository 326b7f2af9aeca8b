func.func @layer_score_input(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                             %w13: tensor<8x48x64xf32>, %w2: tensor<8x64x24xf32>)
    -> tensor<?x64xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <sigmoid, top_k = 1> activation swiglu score_input layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x48x64xf32>,
          tensor<8x64x24xf32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
