func.func @ep_dispatch_c7_scales(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                                 %er: tensor<8xi32>) {
  %rx, %s, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8 quantization fp8_e4m3_g32_ue8m0
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xi8>, tensor<?x1xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}
