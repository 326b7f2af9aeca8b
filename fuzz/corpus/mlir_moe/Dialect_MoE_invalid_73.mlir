func.func @combine_c1_rank(%o: tensor<?x64xf32>, %s: tensor<?xi32>, %w: tensor<?x2xf32>) {
  %y = moe.combine %o, %s, %w
    : (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xf32>) -> tensor<?x64xf32>
  return
}
