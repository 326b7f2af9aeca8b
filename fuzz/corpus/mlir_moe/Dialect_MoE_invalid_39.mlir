func.func @layer_c2_local(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                          %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>,
                          %er: tensor<8xi32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 4, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>, tensor<8xi32>) -> tensor<?x64xf32>
  return
}
