func.func @ep_dispatch_c6_both(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                               %er: tensor<8xi32>, %p: tensor<10xi32>, %s: tensor<10xf32>) {
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er placement(%p, %s) capacity = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>, tensor<10xi32>, tensor<10xf32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}
