func.func @ep_combine_c1_hidden(%p: tensor<?x64xf32>, %h: i64) {
  %y = moe.ep_combine %p, %h : (tensor<?x64xf32>, i64) -> tensor<?x32xf32>
  return
}
