func.func @dispatch_c1_tokens(%x: tensor<4x64xf32>, %ids: tensor<5x2xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8
    : (tensor<4x64xf32>, tensor<5x2xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<5x2xi32>)
  return
}
