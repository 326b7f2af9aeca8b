func.func private @moert_ep_dispatch_f32(i32) -> i32
func.func @other_type(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>,
                      %er: tensor<8xi32>) -> i64 {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 16
    : (tensor<4x64xf32>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return %h : i64
}
