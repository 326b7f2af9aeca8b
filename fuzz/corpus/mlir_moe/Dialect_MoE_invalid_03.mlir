func.func @routing_c3_zero() attributes {r = #moe.routing<sigmoid, top_k = 2, n_group = 4, topk_group = 0>} {
  return
}
