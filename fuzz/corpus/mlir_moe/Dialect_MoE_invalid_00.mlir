func.func @routing_c1() attributes {r = #moe.routing<softmax, top_k = 0>} {
  return
}
