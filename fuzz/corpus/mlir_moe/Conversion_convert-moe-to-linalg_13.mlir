func.func @activation_bf16(%h: tensor<6x16xbf16>) -> tensor<6x8xbf16> {
  %a = moe.activation %h kind swiglu : (tensor<6x16xbf16>) -> tensor<6x8xbf16>
  return %a : tensor<6x8xbf16>
}
