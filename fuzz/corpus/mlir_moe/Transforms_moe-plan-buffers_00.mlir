func.func @prefill(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                   %er: tensor<8xi32>) -> tensor<?x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 512 ep = 2 max_tokens = 256
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
