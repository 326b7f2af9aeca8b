func.func @chunk_c2(%x: tensor<8x16xf32>) {
  %y = moe.chunk_loop %x chunk_size = 4 : (tensor<8x16xf32>) -> tensor<8x16xf32> {
  ^bb0(%c: tensor<8x16xf32>):
    moe.yield %c : tensor<8x16xf32>
  }
  return
}
