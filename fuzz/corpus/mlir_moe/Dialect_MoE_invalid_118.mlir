func.func @layer_c9(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>,
                    %w13: tensor<4x4194304x8xf32>, %w2: tensor<4x8x2097152xf32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4194304x8xf32>,
          tensor<4x8x2097152xf32>) -> tensor<?x8xf32>
  return
}
