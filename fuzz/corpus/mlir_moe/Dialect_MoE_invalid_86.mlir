func.func @layer_c6_both(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                         %w13: tensor<5x64x64xf32>, %w2: tensor<5x64x32xf32>,
                         %er: tensor<8xi32>, %p: tensor<10xi32>, %s: tensor<10xf32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er) placement(%p, %s)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<5x64x64xf32>, tensor<5x64x32xf32>,
          tensor<8xi32>, tensor<10xi32>, tensor<10xf32>) -> tensor<?x64xf32>
  return
}
