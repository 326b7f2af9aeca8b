func.func @dispatch_masked_offsets(%x: tensor<4x16xf32>, %ids: tensor<4x2xi32>)
    -> (tensor<32x16xf32>, tensor<5xi32>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 4 capacity = 8 row_tile = 4
    : (tensor<4x16xf32>, tensor<4x2xi32>)
      -> (tensor<32x16xf32>, tensor<32xi32>, tensor<4x2xi32>, tensor<5xi32>)
  return %rows, %off : tensor<32x16xf32>, tensor<5xi32>
}
