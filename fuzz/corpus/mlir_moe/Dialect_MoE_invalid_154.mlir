func.func @fp8_c1_block(%x: tensor<?x64xf32>, %w: tensor<4x32x64xi8>, %re: tensor<?xi32>,
                        %s: tensor<4x2x2xf32>) {
  %y = moe.grouped_matmul %x, %w, %re weight_scales %s {weight_block = array<i64: 0, 32>}
    : (tensor<?x64xf32>, tensor<4x32x64xi8>, tensor<?xi32>, tensor<4x2x2xf32>) -> tensor<?x32xf32>
  return
}
