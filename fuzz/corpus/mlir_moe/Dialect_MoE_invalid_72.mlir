func.func @act_c2_result(%h: tensor<?x64xf32>) {
  %a = moe.activation %h kind swiglu : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}
