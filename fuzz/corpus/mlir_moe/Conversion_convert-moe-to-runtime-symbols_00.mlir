func.func private @moert_ep_combine_f32(tensor<?x?xf32>, i64) -> tensor<?x?xf32>
func.func @reuse(%p: tensor<?x64xf32>, %h: i64) -> tensor<?x64xf32> {
  %y = moe.ep_combine %p, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
