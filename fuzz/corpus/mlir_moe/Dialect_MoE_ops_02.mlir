func.func @layer_ep(%x: tensor<?x64xbf16>, %wr: tensor<32x64xbf16>,
                    %b: tensor<32xf32>, %w13: tensor<8x48x64xbf16>,
                    %w2: tensor<8x64x24xbf16>, %s13: tensor<48x64xbf16>,
                    %s2: tensor<64x24xbf16>, %er: tensor<32xi32>)
    -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr bias %b) experts(%w13, %w2) shared(%s13, %s2)
         expert_rank(%er)
         routing <sigmoid, top_k = 4, n_group = 8, topk_group = 4, normalize,
                  scale = 2.5, correction_bias>
         activation swiglu layout <ep = 4, tp = 1> {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xbf16>, tensor<32x64xbf16>, tensor<32xf32>,
          tensor<8x48x64xbf16>, tensor<8x64x24xbf16>, tensor<48x64xbf16>,
          tensor<64x24xbf16>, tensor<32xi32>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
