func.func @dispatch_c1_dynamic_k(%x: tensor<?x64xf32>, %ids: tensor<?x?xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8
    : (tensor<?x64xf32>, tensor<?x?xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x?xi32>)
  return
}
