func.func @ep_combine_c2(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>,
                         %er: tensor<8xi32>) {
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 16
    : (tensor<4x64xf32>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %y = moe.ep_combine %rx, %h : (tensor<?x64xf32>, i64) -> tensor<5x64xf32>
  return
}
