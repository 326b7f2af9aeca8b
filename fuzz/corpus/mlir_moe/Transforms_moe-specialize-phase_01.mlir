func.func @one_rank(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>, %w13: tensor<8x24x16xf32>,
                    %w2: tensor<8x16x12xf32>) -> tensor<?x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2, normalize> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<8x24x16xf32>, tensor<8x16x12xf32>)
       -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
