func.func @ep_dispatch_c2_element(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>,
                                  %w: tensor<?x2xf32>, %er: tensor<8xi32>) {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 64
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}
