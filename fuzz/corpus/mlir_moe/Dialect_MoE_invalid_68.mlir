func.func @act_c1_rank(%h: tensor<?x8x64xf32>) {
  %a = moe.activation %h kind swiglu : (tensor<?x8x64xf32>) -> tensor<?x32xf32>
  return
}
