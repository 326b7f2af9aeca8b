func.func @act_c1_element(%h: tensor<?x64xf32>) {
  %a = moe.activation %h kind swiglu : (tensor<?x64xf32>) -> tensor<?x32xbf16>
  return
}
