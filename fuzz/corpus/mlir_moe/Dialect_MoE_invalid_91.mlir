func.func @ep_dispatch_c6_shares(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                                 %p: tensor<10xi32>, %s: tensor<8xf32>) {
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w placement(%p, %s) capacity = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<10xi32>, tensor<8xf32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}
