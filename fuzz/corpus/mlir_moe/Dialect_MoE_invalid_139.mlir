func.func @layer_c12_no_shared(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                               %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>,
                               %g: tensor<1x64xf32>) {
  %y = "moe.layer"(%x, %wr, %w13, %w2, %g) <{
         activation = #moe<activation swiglu>,
         layout = #moe.layout<ep = 1, tp = 1>,
         operandSegmentSizes = array<i32: 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0>,
         routing = #moe.routing<softmax, top_k = 2>}>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>, tensor<1x64xf32>) -> tensor<?x64xf32>
  return
}
