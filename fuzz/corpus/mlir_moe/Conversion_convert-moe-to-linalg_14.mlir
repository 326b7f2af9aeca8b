func.func @combine(%o: tensor<?x16xf32>, %s: tensor<?x2xi32>, %w: tensor<?x2xf32>)
    -> tensor<?x16xf32> {
  %y = moe.combine %o, %s, %w
    : (tensor<?x16xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
