func.func @layer_c12_shape(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                           %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>,
                           %s13: tensor<64x64xf32>, %s2: tensor<64x32xf32>,
                           %g: tensor<2x64xf32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) shared(%s13, %s2) shared_gate(%g)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>, tensor<64x64xf32>, tensor<64x32xf32>, tensor<2x64xf32>)
         -> tensor<?x64xf32>
  return
}
