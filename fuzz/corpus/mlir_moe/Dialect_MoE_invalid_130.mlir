func.func @dispatch_c6_k(%x: tensor<?x64xf32>, %ids: tensor<?x0xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 4
    : (tensor<?x64xf32>, tensor<?x0xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x0xi32>)
  return
}
