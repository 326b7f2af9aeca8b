func.func @dispatch(%x: tensor<?x16xf32>, %ids: tensor<?x2xi32>)
    -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<5xi32>) {
  %d, %re, %s, %o = moe.dispatch %x, %ids num_experts = 4 row_tile = 8
    : (tensor<?x16xf32>, tensor<?x2xi32>)
      -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<5xi32>)
  return %d, %re, %s, %o : tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<5xi32>
}
