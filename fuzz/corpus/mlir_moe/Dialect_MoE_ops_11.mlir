func.func @activation(%h: tensor<?x64xf32>, %h2: tensor<6x16xbf16>)
    -> (tensor<?x32xf32>, tensor<6x8xbf16>) {
  %a = moe.activation %h kind swiglu : (tensor<?x64xf32>) -> tensor<?x32xf32>
  %a2 = moe.activation %h2 kind swiglu : (tensor<6x16xbf16>) -> tensor<6x8xbf16>
  return %a, %a2 : tensor<?x32xf32>, tensor<6x8xbf16>
}
