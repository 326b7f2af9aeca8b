func.func private @routing_c7() attributes {r = #moe.routing<softmax, top_k = 2, group_max>}
