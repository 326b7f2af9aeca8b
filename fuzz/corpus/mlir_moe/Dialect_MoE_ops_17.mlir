func.func @route_logit_bias_clamped_activation(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                                               %rb: tensor<8xf32>, %h: tensor<?x64xf32>)
    -> (tensor<?x2xi32>, tensor<?x32xf32>) {
  %ids, %w = moe.route %x, %wr logit_bias %rb routing <softmax, top_k = 2>
      : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  %a = moe.activation %h kind clamped_swiglu {swiglu_alpha = 1.5 : f32, swiglu_limit = 3.0 : f32}
      : (tensor<?x64xf32>) -> tensor<?x32xf32>
  return %ids, %a : tensor<?x2xi32>, tensor<?x32xf32>
}
