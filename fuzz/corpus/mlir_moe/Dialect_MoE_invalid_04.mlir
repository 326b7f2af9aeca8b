func.func @routing_c4() attributes {r = #moe.routing<softmax, top_k = 2, scale = -1.0>} {
  return
}
