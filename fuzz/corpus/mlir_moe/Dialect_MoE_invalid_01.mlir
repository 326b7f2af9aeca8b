func.func @routing_c2() attributes {r = #moe.routing<sigmoid, top_k = 2, n_group = 0, topk_group = 1>} {
  return
}
