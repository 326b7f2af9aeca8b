func.func @dispatch_masked_row_tile(%x: tensor<?x16xf32>, %ids: tensor<?x2xi32>,
                                    %q: tensor<32x64xi8>, %w: tensor<4x8x64xf32>,
                                    %s: tensor<32x2xf32>)
    -> (tensor<32x16xf32>, tensor<32x8xf32>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 4 capacity = 8 row_tile = 4
    : (tensor<?x16xf32>, tensor<?x2xi32>)
      -> (tensor<32x16xf32>, tensor<32xi32>, tensor<?x2xi32>, tensor<5xi32>)
  %r = moe.grouped_matmul %q, %w, %re scales %s offsets %off
    : (tensor<32x64xi8>, tensor<4x8x64xf32>, tensor<32xi32>, tensor<32x2xf32>, tensor<5xi32>)
      -> tensor<32x8xf32>
  return %rows, %r : tensor<32x16xf32>, tensor<32x8xf32>
}
