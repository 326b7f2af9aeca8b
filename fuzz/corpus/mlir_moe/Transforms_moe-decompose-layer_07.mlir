func.func @no_layer(%h: tensor<?x64xf32>, %b: tensor<?x32xf32>, %n: index)
    -> tensor<?x32xf32> {
  %a = moe.activation %h kind swiglu : (tensor<?x64xf32>) -> tensor<?x32xf32>
  %e = tensor.empty(%n) : tensor<?x32xf32>
  %s = linalg.add ins(%a, %b : tensor<?x32xf32>, tensor<?x32xf32>)
                  outs(%e : tensor<?x32xf32>) -> tensor<?x32xf32>
  return %s : tensor<?x32xf32>
}
