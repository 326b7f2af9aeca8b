func.func @layer_decode_row_tile(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>,
                                 %w13: tensor<8x8x16xf32>, %w2: tensor<8x16x4xf32>)
    -> tensor<?x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
         {max_tokens_per_rank = 8 : i64, phase = #moe<phase decode>}
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<8x8x16xf32>, tensor<8x16x4xf32>)
         -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
