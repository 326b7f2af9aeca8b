func.func @routing_c3() attributes {r = #moe.routing<sigmoid, top_k = 2, n_group = 4, topk_group = 5>} {
  return
}
