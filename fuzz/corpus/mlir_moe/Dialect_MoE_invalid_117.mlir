func.func @route_c9_experts(%x: tensor<?x8xf32>, %wr: tensor<2097152x8xf32>,
                            %w13: tensor<2097152x8x8xf32>, %w2: tensor<2097152x8x4xf32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x8xf32>, tensor<2097152x8xf32>, tensor<2097152x8x8xf32>,
          tensor<2097152x8x4xf32>) -> tensor<?x8xf32>
  return
}
