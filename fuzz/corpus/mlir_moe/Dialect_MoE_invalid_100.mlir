func.func @ep_dispatch_c5(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>,
                          %w: tensor<?x2xf32>, %er: tensor<8xi32>) {
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8 ep = 3
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}
