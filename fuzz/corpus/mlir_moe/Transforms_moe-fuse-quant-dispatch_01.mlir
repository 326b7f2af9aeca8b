func.func @odd_hidden(%x: tensor<?x48xf32>, %ids: tensor<?x4xi32>, %w: tensor<?x4xf32>,
                      %rank: tensor<16xi32>) -> tensor<?x48xf32> {
  %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64
    : (tensor<?x48xf32>, tensor<?x4xi32>, tensor<?x4xf32>, tensor<16xi32>)
      -> (tensor<?x48xf32>, tensor<?x4xi32>, tensor<?x4xf32>, i64)
  %y = moe.ep_combine %rx, %h : (tensor<?x48xf32>, i64) -> tensor<?x48xf32>
  return %y : tensor<?x48xf32>
}
