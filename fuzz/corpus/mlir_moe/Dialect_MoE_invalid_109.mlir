func.func @routing_c5_subnormal() attributes {r = #moe.routing<softmax, top_k = 2, scale = 1.0e-40>} {
  return
}
