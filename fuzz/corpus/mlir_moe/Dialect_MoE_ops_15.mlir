func.func @layer_group_max_score_input(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                                       %w13: tensor<8x48x64xf32>, %w2: tensor<8x64x24xf32>)
    -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %a = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 3, n_group = 4, topk_group = 2, group_max, scale = 1.5>
         activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x48x64xf32>,
          tensor<8x64x24xf32>) -> tensor<?x64xf32>
  %b = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <sigmoid, top_k = 1> activation swiglu score_input layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x48x64xf32>,
          tensor<8x64x24xf32>) -> tensor<?x64xf32>
  return %a, %b : tensor<?x64xf32>, tensor<?x64xf32>
}
