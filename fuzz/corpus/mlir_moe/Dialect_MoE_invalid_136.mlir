func.func @chunk_c1(%x: tensor<?x16xf32>) {
  %y = moe.chunk_loop %x chunk_size = 4 : (tensor<?x16xf32>) -> tensor<?x8xf32> {
  ^bb0(%c: tensor<?x16xf32>):
    moe.yield %c : tensor<?x16xf32>
  }
  return
}
