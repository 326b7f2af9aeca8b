func.func @routing_c4_nan() attributes {r = #moe.routing<softmax, top_k = 2, scale = 0x7FF8000000000000>} {
  return
}
