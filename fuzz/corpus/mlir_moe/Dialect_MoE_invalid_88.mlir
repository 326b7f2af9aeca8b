func.func @layer_c2_placed(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                           %w13: tensor<4x64x64xf32>, %w2: tensor<4x64x32xf32>,
                           %p: tensor<10xi32>, %s: tensor<10xf32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) placement(%p, %s)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<4x64x64xf32>, tensor<4x64x32xf32>,
          tensor<10xi32>, tensor<10xf32>) -> tensor<?x64xf32>
  return
}
