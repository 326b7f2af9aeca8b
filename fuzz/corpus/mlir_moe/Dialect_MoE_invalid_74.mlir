func.func @combine_c1_shape(%o: tensor<?x64xf32>, %s: tensor<?x2xi32>, %w: tensor<?x4xf32>) {
  %y = moe.combine %o, %s, %w
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x4xf32>) -> tensor<?x64xf32>
  return
}
