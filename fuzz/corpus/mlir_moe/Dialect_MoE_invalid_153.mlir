func.func @fp8_c1_shape(%x: tensor<?x64xf32>, %w: tensor<4x30x64xi8>, %re: tensor<?xi32>,
                        %s: tensor<4x1x2xf32>) {
  %y = moe.grouped_matmul %x, %w, %re weight_scales %s {weight_block = array<i64: 16, 32>}
    : (tensor<?x64xf32>, tensor<4x30x64xi8>, tensor<?xi32>, tensor<4x1x2xf32>) -> tensor<?x30xf32>
  return
}
