func.func @chunk_c3(%x: tensor<?x16xf32>, %o: tensor<?x8xf32>) {
  %y = moe.chunk_loop %x chunk_size = 4 : (tensor<?x16xf32>) -> tensor<?x16xf32> {
  ^bb0(%c: tensor<?x16xf32>):
    moe.yield %o : tensor<?x8xf32>
  }
  return
}
