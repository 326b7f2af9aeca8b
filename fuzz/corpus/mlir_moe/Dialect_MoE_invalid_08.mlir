func.func @layout_c1_tp() attributes {l = #moe.layout<ep = 1, tp = -2>} {
  return
}
