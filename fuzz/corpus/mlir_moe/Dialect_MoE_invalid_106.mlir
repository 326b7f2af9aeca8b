func.func @tp_c2_rows(%s: tensor<?x64xf32>, %x: tensor<8x64xf32>) {
  %y = moe.tp_gather %s, %x tp = 2 : (tensor<?x64xf32>, tensor<8x64xf32>) -> tensor<4x64xf32>
  return
}
