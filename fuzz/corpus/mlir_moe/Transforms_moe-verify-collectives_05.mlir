func.func @if_on_received_rows(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                               %rank: tensor<8xi32>) {
  %c0 = arith.constant 0 : index
  %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %r = tensor.dim %rx, %c0 : tensor<?x64xf32>
  %none = arith.cmpi eq, %r, %c0 : index
  scf.if %none {
    %y = moe.ep_combine %rx, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
  }
  return
}
