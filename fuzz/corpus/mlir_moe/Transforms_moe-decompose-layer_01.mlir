func.func @layer_static_bias(%x: tensor<4x16xf32>, %wr: tensor<8x16xf32>,
                             %b: tensor<8xf32>, %w13: tensor<8x8x16xf32>,
                             %w2: tensor<8x16x4xf32>) -> tensor<4x16xf32> {
  %y = moe.layer %x router(%wr bias %b) experts(%w13, %w2)
         routing <sigmoid, top_k = 3, n_group = 4, topk_group = 2, normalize,
                  scale = 2.5, correction_bias>
         activation swiglu layout <ep = 1, tp = 1>
       : (tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32>,
          tensor<8x8x16xf32>, tensor<8x16x4xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}
