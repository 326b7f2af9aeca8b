func.func @dispatch(%x: tensor<?x16xf32>, %ids: tensor<?x2xi32>)
    -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 4
    : (tensor<?x16xf32>, tensor<?x2xi32>)
      -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>)
  return %rows, %re, %slot : tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>
}
