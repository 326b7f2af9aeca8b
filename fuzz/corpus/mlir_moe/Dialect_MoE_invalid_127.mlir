func.func @dispatch_c6(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 4 capacity = 4611686018427387904
    : (tensor<?x64xf32>, tensor<?x2xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>)
  return
}
