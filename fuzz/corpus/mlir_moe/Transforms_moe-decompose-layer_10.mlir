func.func @layer_row_tile(%x: tensor<4x16xf32>, %wr: tensor<8x16xf32>,
                          %w13: tensor<8x8x16xf32>, %w2: tensor<8x16x4xf32>) -> tensor<4x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<4x16xf32>, tensor<8x16xf32>, tensor<8x8x16xf32>, tensor<8x16x4xf32>)
         -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}
