func.func @tp_c1_columns(%x: tensor<?x64xf32>) {
  %s = moe.tp_slice %x tp = 2 : (tensor<?x64xf32>) -> tensor<?x32xf32>
  return
}
