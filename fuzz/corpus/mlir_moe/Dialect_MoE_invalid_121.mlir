func.func @layer_c9_slots(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %w13: tensor<2097152x8x8xf32>,
                          %w2: tensor<2097152x8x4xf32>, %p: tensor<4194304xi32>, %s: tensor<4194304xf32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) placement(%p, %s)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 8 : i64}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<2097152x8x8xf32>, tensor<2097152x8x4xf32>,
          tensor<4194304xi32>, tensor<4194304xf32>) -> tensor<?x8xf32>
  return
}
