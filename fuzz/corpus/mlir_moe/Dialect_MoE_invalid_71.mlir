func.func @act_c2_dynamic(%h: tensor<?x?xf32>) {
  %a = moe.activation %h kind swiglu : (tensor<?x?xf32>) -> tensor<?x32xf32>
  return
}
