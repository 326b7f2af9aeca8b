func.func @layer_c10(%x: tensor<5x8xf32>, %wr: tensor<4x8xf32>, %w13: tensor<4x8x8xf32>,
                     %w2: tensor<4x8x4xf32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
         {max_tokens_per_rank = 4 : i64}
       : (tensor<5x8xf32>, tensor<4x8xf32>, tensor<4x8x8xf32>, tensor<4x8x4xf32>) -> tensor<5x8xf32>
  return
}
