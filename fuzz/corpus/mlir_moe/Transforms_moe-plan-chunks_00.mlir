func.func @ep_layer(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>, %w13: tensor<4x24x16xf32>,
                    %w2: tensor<4x16x12xf32>, %r: tensor<8xi32>) -> tensor<?x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%r)
         routing <softmax, top_k = 2, normalize> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 1000 : i64}
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<4x24x16xf32>, tensor<4x16x12xf32>,
          tensor<8xi32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
