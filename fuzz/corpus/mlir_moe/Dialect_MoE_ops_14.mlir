func.func @attributes() attributes {
    moe.act = #moe<activation swiglu>,
    moe.layout = #moe.layout<ep = 8, tp = 2>,
    moe.routing_deepseek = #moe.routing<sigmoid, top_k = 8, n_group = 8,
        topk_group = 4, normalize, scale = 2.5, correction_bias>,
    moe.routing_plain = #moe.routing<softmax, top_k = 2>,
    moe.routing_scaled = #moe.routing<sigmoid, top_k = 1, scale = 1.25>} {
  return
}
