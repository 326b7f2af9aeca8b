func.func @routing_c6_groups() attributes {r = #moe.routing<sigmoid, top_k = 2, n_group = 2048, topk_group = 1>} {
  return
}
