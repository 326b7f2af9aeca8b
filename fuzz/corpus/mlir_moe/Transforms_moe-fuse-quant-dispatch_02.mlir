func.func @experts(%x: tensor<?x256xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                   %rank: tensor<8xi32>, %w13: tensor<4x64x256xf32>,
                   %w2: tensor<4x256x32xf32>) -> tensor<?x256xf32> {
  %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64
    : (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %rows, %re, %slot = moe.dispatch %rx, %rids num_experts = 4
    : (tensor<?x256xf32>, tensor<?x2xi32>) -> (tensor<?x256xf32>, tensor<?xi32>, tensor<?x2xi32>)
  %g = moe.grouped_matmul %rows, %w13, %re
    : (tensor<?x256xf32>, tensor<4x64x256xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %a = moe.activation %g kind swiglu : (tensor<?x64xf32>) -> tensor<?x32xf32>
  %o = moe.grouped_matmul %a, %w2, %re
    : (tensor<?x32xf32>, tensor<4x256x32xf32>, tensor<?xi32>) -> tensor<?x256xf32>
  %c = moe.combine %o, %slot, %rw
    : (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x256xf32>
  %y = moe.ep_combine %c, %h : (tensor<?x256xf32>, i64) -> tensor<?x256xf32>
  return %y : tensor<?x256xf32>
}
