func.func @zero_tokens(%x: tensor<0x16xf32>, %wr: tensor<4x16xf32>, %b: tensor<4xf32>,
                       %w13: tensor<4x8x16xf32>, %w2: tensor<4x16x4xf32>,
                       %s13: tensor<6x16xf32>, %s2: tensor<16x3xf32>) -> tensor<0x16xf32> {
  %y = moe.layer %x router(%wr bias %b) experts(%w13, %w2) shared(%s13, %s2)
         routing <sigmoid, top_k = 2, n_group = 2, topk_group = 1, normalize, correction_bias>
         activation swiglu layout <ep = 1, tp = 1>
       : (tensor<0x16xf32>, tensor<4x16xf32>, tensor<4xf32>, tensor<4x8x16xf32>,
          tensor<4x16x4xf32>, tensor<6x16xf32>, tensor<16x3xf32>) -> tensor<0x16xf32>
  return %y : tensor<0x16xf32>
}
