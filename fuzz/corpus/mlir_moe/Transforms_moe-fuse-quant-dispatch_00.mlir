func.func @fuse(%x: tensor<?x256xbf16>, %ids: tensor<?x4xi32>, %w: tensor<?x4xf32>,
                %rank: tensor<16xi32>) -> tensor<?x256xbf16> {
  %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64
    : (tensor<?x256xbf16>, tensor<?x4xi32>, tensor<?x4xf32>, tensor<16xi32>)
      -> (tensor<?x256xbf16>, tensor<?x4xi32>, tensor<?x4xf32>, i64)
  %y = moe.ep_combine %rx, %h : (tensor<?x256xbf16>, i64) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}
