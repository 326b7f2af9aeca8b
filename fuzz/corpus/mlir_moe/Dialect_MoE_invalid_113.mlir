func.func @size_c1(%x: tensor<?x64xf32>, %wr: tensor<4611686018427387904x64xf32>,
                   %w13: tensor<4611686018427387904x64x64xf32>, %w2: tensor<4611686018427387904x64x32xf32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<4611686018427387904x64xf32>, tensor<4611686018427387904x64x64xf32>,
          tensor<4611686018427387904x64x32xf32>) -> tensor<?x64xf32>
  return
}
