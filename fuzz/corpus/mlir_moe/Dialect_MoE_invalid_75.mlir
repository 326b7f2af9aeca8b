func.func @combine_c1_element(%o: tensor<?x64xbf16>, %s: tensor<?x2xi32>, %w: tensor<?x2xbf16>) {
  %y = moe.combine %o, %s, %w
    : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xbf16>) -> tensor<?x64xbf16>
  return
}
