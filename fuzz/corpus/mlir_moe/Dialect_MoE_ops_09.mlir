func.func @dispatch_row_tile(%x: tensor<3x16xf32>, %ids: tensor<3x2xi32>, %w: tensor<4x8x16xf32>)
    -> (tensor<34x8xf32>, tensor<3x2xi32>, tensor<5xi32>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 4 row_tile = 8
    : (tensor<3x16xf32>, tensor<3x2xi32>)
      -> (tensor<34x16xf32>, tensor<34xi32>, tensor<3x2xi32>, tensor<5xi32>)
  %r = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<34x16xf32>, tensor<4x8x16xf32>, tensor<34xi32>, tensor<5xi32>) -> tensor<34x8xf32>
  return %r, %slot, %off : tensor<34x8xf32>, tensor<3x2xi32>, tensor<5xi32>
}
