func.func @combine(%o: tensor<?x64xf32>, %s: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                   %o2: tensor<6x16xbf16>, %s2: tensor<3x2xi32>,
                   %w2: tensor<3x2xf32>) -> (tensor<?x64xf32>, tensor<3x16xbf16>) {
  %y = moe.combine %o, %s, %w
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x64xf32>
  %y2 = moe.combine %o2, %s2, %w2
    : (tensor<6x16xbf16>, tensor<3x2xi32>, tensor<3x2xf32>) -> tensor<3x16xbf16>
  return %y, %y2 : tensor<?x64xf32>, tensor<3x16xbf16>
}
