func.func @act_c2_odd(%h: tensor<?x63xf32>) {
  %a = moe.activation %h kind swiglu : (tensor<?x63xf32>) -> tensor<?x31xf32>
  return
}
