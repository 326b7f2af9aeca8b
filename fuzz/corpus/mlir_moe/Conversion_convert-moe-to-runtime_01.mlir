func.func @two_exchanges(%x: tensor<?x?xbf16>, %ids: tensor<?x?xi32>,
                         %w: tensor<?x?xf32>, %er: tensor<?xi32>) -> (i64, i64) {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8
    : (tensor<?x?xbf16>, tensor<?x?xi32>, tensor<?x?xf32>, tensor<?xi32>)
      -> (tensor<?x?xbf16>, tensor<?x?xi32>, tensor<?x?xf32>, i64)
  %r2, %li2, %lw2, %h2 = moe.ep_dispatch %r, %ids, %w, %er capacity = 8
    : (tensor<?x?xbf16>, tensor<?x?xi32>, tensor<?x?xf32>, tensor<?xi32>)
      -> (tensor<?x?xbf16>, tensor<?x?xi32>, tensor<?x?xf32>, i64)
  return %h2, %h : i64, i64
}
