func.func @ep_combine_c1_element(%p: tensor<?x64xbf16>, %h: i64) {
  %y = moe.ep_combine %p, %h : (tensor<?x64xbf16>, i64) -> tensor<?x64xf32>
  return
}
