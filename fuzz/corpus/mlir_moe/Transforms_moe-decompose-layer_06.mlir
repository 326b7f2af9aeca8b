func.func @two_layers(%x: tensor<?x16xf32>, %wr: tensor<4x16xf32>,
                      %w13: tensor<4x8x16xf32>, %w2: tensor<4x16x4xf32>)
    -> tensor<?x16xf32> {
  %y1 = moe.layer %x router(%wr) experts(%w13, %w2)
          routing <softmax, top_k = 1> activation swiglu layout <ep = 1, tp = 1>
        : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>,
           tensor<4x16x4xf32>) -> tensor<?x16xf32>
  %y2 = moe.layer %y1 router(%wr) experts(%w13, %w2)
          routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
        : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>,
           tensor<4x16x4xf32>) -> tensor<?x16xf32>
  return %y2 : tensor<?x16xf32>
}
