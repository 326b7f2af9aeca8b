func.func @tp_c3(%x: tensor<?x64xf32>) {
  %s = moe.tp_slice %x tp = 2 : (tensor<?x64xf32>) -> tensor<4x64xf32>
  return
}
