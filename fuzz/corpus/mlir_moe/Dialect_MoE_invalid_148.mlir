func.func @layer_c16_swiglu(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                            %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
         {swiglu_limit = 7.0 : f32}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>) -> tensor<?x64xf32>
  return
}
