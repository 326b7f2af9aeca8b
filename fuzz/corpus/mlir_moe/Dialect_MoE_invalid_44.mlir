func.func @layer_c6_positive(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                             %w13: tensor<4x64x64xf32>, %w2: tensor<4x64x32xf32>,
                             %er: tensor<8xi32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 0 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<4x64x64xf32>,
          tensor<4x64x32xf32>, tensor<8xi32>) -> tensor<?x64xf32>
  return
}
