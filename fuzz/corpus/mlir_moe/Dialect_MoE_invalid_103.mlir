func.func @ep_dispatch_c3_group(%x: tensor<?x100xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                                %rank: tensor<8xi32>) {
  %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64 quantization fp8_e4m3_g128
    : (tensor<?x100xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x100xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}
