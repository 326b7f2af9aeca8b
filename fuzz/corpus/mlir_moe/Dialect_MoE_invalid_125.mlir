func.func @layer_c11_capacity(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %w13: tensor<2x8x8xf32>,
                              %w2: tensor<2x8x4xf32>, %er: tensor<4xi32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 1> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 2147483648 : i64}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<2x8x8xf32>, tensor<2x8x4xf32>, tensor<4xi32>)
         -> tensor<?x8xf32>
  return
}
