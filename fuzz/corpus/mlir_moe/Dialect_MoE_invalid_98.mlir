func.func @dispatch_c5_tokens(%x: tensor<9x64xf32>, %ids: tensor<9x2xi32>) {
  %d, %e, %s = moe.dispatch %x, %ids num_experts = 4 capacity = 8
    : (tensor<9x64xf32>, tensor<9x2xi32>) -> (tensor<32x64xf32>, tensor<32xi32>, tensor<9x2xi32>)
  return
}
