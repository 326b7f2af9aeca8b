func.func @static_slice(%x: tensor<8x64xf32>) -> tensor<4x64xf32> {
  %s = moe.tp_slice %x tp = 2 : (tensor<8x64xf32>) -> tensor<4x64xf32>
  return %s : tensor<4x64xf32>
}
