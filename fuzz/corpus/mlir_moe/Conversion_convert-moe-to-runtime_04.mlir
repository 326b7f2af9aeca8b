func.func @per_batch(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                     %p: tensor<10xi32>, %s: tensor<10xf32>) -> tensor<?x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w placement(%p, %s) per_batch_replicas
      capacity = 16 ep = 2
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<10xi32>, tensor<10xf32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
