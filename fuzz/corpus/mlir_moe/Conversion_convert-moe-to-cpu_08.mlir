func.func @gemm_fp8_rows(%q: tensor<?x64xi8>, %w: tensor<4x32x64xf32>, %re: tensor<?xi32>,
                         %s: tensor<?x2xf32>, %off: tensor<5xi32>) -> tensor<?x32xf32> {
  %y = moe.grouped_matmul %q, %w, %re scales %s offsets %off
    : (tensor<?x64xi8>, tensor<4x32x64xf32>, tensor<?xi32>, tensor<?x2xf32>, tensor<5xi32>)
      -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
