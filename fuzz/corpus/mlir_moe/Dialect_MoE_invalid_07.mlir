func.func @layout_c1() attributes {l = #moe.layout<ep = 0, tp = 1>} {
  return
}
