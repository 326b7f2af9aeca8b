func.func @unagreed_chunk_loop(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
    %w13: tensor<4x64x64xf32>, %w2: tensor<4x64x32xf32>, %rank: tensor<8xi32>) -> tensor<?x64xf32> {
  %y = moe.chunk_loop %x chunk_size = 16 : (tensor<?x64xf32>) -> tensor<?x64xf32> {
  ^bb0(%chunk: tensor<?x64xf32>):
    %ids, %w = moe.route %chunk, %wr routing <softmax, top_k = 2>
      : (tensor<?x64xf32>, tensor<8x64xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
    %rx, %rids, %rw, %h = moe.ep_dispatch %chunk, %ids, %w, %rank capacity = 64
      : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
        -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
    moe.yield %rx : tensor<?x64xf32>
  }
  return %y : tensor<?x64xf32>
}
