func.func @ep_dispatch_c1_shape(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>,
                                %w: tensor<4x3xf32>, %er: tensor<8xi32>) {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 64
    : (tensor<4x64xf32>, tensor<4x2xi32>, tensor<4x3xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x3xf32>, i64)
  return
}
