func.func @gmm_c4_groups(%q: tensor<?x64xi8>, %w: tensor<4x32x64xf32>, %re: tensor<?xi32>,
                         %s: tensor<?x3xf32>) {
  %y = moe.grouped_matmul %q, %w, %re scales %s
    : (tensor<?x64xi8>, tensor<4x32x64xf32>, tensor<?xi32>, tensor<?x3xf32>) -> tensor<?x32xf32>
  return
}
