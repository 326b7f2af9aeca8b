func.func @layer_gpt_oss(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>, %rb: tensor<8xf32>,
                         %w13: tensor<8x48x64xbf16>, %w2: tensor<8x64x24xbf16>,
                         %b13: tensor<8x48xbf16>, %b2: tensor<8x64xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr logit_bias %rb) experts(%w13, %w2 biases(%b13, %b2))
         routing <softmax, top_k = 2, normalize> activation clamped_swiglu
         layout <ep = 1, tp = 1> {swiglu_alpha = 1.702 : f32, swiglu_limit = 7.0 : f32}
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8xf32>, tensor<8x48x64xbf16>,
          tensor<8x64x24xbf16>, tensor<8x48xbf16>, tensor<8x64xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
