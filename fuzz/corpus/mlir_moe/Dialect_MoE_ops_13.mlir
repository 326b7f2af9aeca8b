func.func @ep_exchange(%x: tensor<?x64xbf16>, %ids: tensor<?x4xi32>,
                       %w: tensor<?x4xf32>, %er: tensor<16xi32>)
    -> (tensor<?x64xbf16>, tensor<?x4xi32>, tensor<?x4xf32>) {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 256
    : (tensor<?x64xbf16>, tensor<?x4xi32>, tensor<?x4xf32>, tensor<16xi32>)
      -> (tensor<?x64xbf16>, tensor<?x4xi32>, tensor<?x4xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<?x64xbf16>, i64) -> tensor<?x64xbf16>
  return %y, %li, %lw : tensor<?x64xbf16>, tensor<?x4xi32>, tensor<?x4xf32>
}
