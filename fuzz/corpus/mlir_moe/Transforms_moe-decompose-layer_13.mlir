func.func @layer_fp8_weights(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                             %w13: tensor<8x48x64xi8>, %w2: tensor<8x64x24xi8>,
                             %s13: tensor<8x3x2xf32>, %s2: tensor<8x4x1xf32>) -> tensor<?x64xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2 weight_scales(%s13, %s2))
         routing <softmax, top_k = 2, normalize> activation swiglu
         layout <ep = 1, tp = 1> {weight_block = array<i64: 16, 32>}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x48x64xi8>, tensor<8x64x24xi8>,
          tensor<8x3x2xf32>, tensor<8x4x1xf32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
