func.func @while_loop(%x: tensor<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x64xf32>
  %false = arith.constant false
  scf.while : () -> () {
    scf.condition(%false)
  } do {
    %n = moe.agree_count %t : index
    scf.yield
  }
  return
}
