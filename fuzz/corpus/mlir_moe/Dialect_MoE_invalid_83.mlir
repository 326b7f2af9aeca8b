func.func @ep_combine_c1_rank(%p: tensor<?x64xf32>, %h: i64) {
  %y = moe.ep_combine %p, %h : (tensor<?x64xf32>, i64) -> tensor<?xf32>
  return
}
