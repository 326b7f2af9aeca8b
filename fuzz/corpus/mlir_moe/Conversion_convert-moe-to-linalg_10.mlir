func.func @activation(%h: tensor<?x16xf32>) -> tensor<?x8xf32> {
  %a = moe.activation %h kind swiglu : (tensor<?x16xf32>) -> tensor<?x8xf32>
  return %a : tensor<?x8xf32>
}
