func.func @layer_shared_gate(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>,
                             %w13: tensor<8x48x64xbf16>, %w2: tensor<8x64x24xbf16>,
                             %s13: tensor<48x64xbf16>, %s2: tensor<64x24xbf16>,
                             %g: tensor<1x64xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) shared(%s13, %s2) shared_gate(%g)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8x48x64xbf16>,
          tensor<8x64x24xbf16>, tensor<48x64xbf16>, tensor<64x24xbf16>,
          tensor<1x64xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
