func.func @dispatch_c5_rows(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  %d, %e, %s = moe.dispatch %x, %ids num_experts = 4 capacity = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>)
  return
}
