#x = affine_map<(t, e, k) -> (t, k)>
#w = affine_map<(t, e, k) -> (e, k)>
#o = affine_map<(t, e, k) -> (t, e)>

func.func @into_bias(%x: tensor<?x256xbf16>, %w: tensor<64x256xbf16>, %bias: tensor<?x64xf32>)
    -> tensor<?x64xf32> {
  %l = linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<?x256xbf16>, tensor<64x256xbf16>) outs(%bias : tensor<?x64xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %af = arith.extf %a : bf16 to f32
    %bf = arith.extf %b : bf16 to f32
    %p = arith.mulf %af, %bf : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<?x64xf32>
  return %l : tensor<?x64xf32>
}
