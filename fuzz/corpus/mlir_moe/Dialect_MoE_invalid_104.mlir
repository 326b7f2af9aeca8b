func.func @layout_c2_tp(%x: tensor<?x64xf32>) attributes {
  layout = #moe.layout<ep = 4, tp = 3>} {
  return
}
