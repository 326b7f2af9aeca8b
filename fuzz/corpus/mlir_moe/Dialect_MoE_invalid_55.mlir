func.func @dispatch_c7_offsets_rank(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>)
      -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<9x1xi32>)
  return
}
