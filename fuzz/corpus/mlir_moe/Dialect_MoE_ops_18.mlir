func.func @fp8_weights(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>,
                       %w13: tensor<8x48x64xi8>, %w2: tensor<8x64x24xi8>,
                       %s13: tensor<8x3x2xf32>, %s2: tensor<8x4x1xf32>,
                       %re: tensor<?xi32>) -> (tensor<?x64xbf16>, tensor<?x48xbf16>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2 weight_scales(%s13, %s2))
         routing <softmax, top_k = 2, normalize> activation swiglu
         layout <ep = 1, tp = 1> {weight_block = array<i64: 16, 32>}
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8x48x64xi8>, tensor<8x64x24xi8>,
          tensor<8x3x2xf32>, tensor<8x4x1xf32>) -> tensor<?x64xbf16>
  %h = moe.grouped_matmul %x, %w13, %re weight_scales %s13 {weight_block = array<i64: 16, 32>}
    : (tensor<?x64xbf16>, tensor<8x48x64xi8>, tensor<?xi32>, tensor<8x3x2xf32>) -> tensor<?x48xbf16>
  return %y, %h : tensor<?x64xbf16>, tensor<?x48xbf16>
}
