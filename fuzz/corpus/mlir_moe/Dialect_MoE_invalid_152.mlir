func.func @fp8_c1_missing(%x: tensor<?x64xf32>, %w: tensor<4x32x64xi8>, %re: tensor<?xi32>) {
  %y = moe.grouped_matmul %x, %w, %re
    : (tensor<?x64xf32>, tensor<4x32x64xi8>, tensor<?xi32>) -> tensor<?x32xf32>
  return
}
