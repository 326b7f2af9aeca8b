func.func @activation_empty(%h: tensor<0x16xf32>) -> tensor<0x8xf32> {
  %a = moe.activation %h kind swiglu : (tensor<0x16xf32>) -> tensor<0x8xf32>
  return %a : tensor<0x8xf32>
}
