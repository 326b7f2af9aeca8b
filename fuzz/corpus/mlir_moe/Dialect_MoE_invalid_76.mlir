func.func @combine_c2_shape(%o: tensor<8x64xf32>, %s: tensor<4x2xi32>, %w: tensor<4x2xf32>) {
  %y = moe.combine %o, %s, %w
    : (tensor<8x64xf32>, tensor<4x2xi32>, tensor<4x2xf32>) -> tensor<8x64xf32>
  return
}
