func.func @combine_c2_element(%o: tensor<?x64xbf16>, %s: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  %y = moe.combine %o, %s, %w
    : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x64xf32>
  return
}
