func.func @layer_ep(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>,
                    %w13: tensor<2x8x16xf32>, %w2: tensor<2x16x4xf32>,
                    %er: tensor<8xi32>) -> tensor<?x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 4, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<2x8x16xf32>,
          tensor<2x16x4xf32>, tensor<8xi32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
