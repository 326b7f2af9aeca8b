func.func @layout_c3() attributes {l = #moe.layout<ep = 4611686018427387904, tp = 1>} {
  return
}
