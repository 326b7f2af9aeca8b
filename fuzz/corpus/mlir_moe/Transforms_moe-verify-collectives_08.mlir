func.func @cond_br(%x: tensor<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x64xf32>
  %any = arith.cmpi sgt, %t, %c0 : index
  cf.cond_br %any, ^work, ^done
^work:
  %n = moe.agree_count %t : index
  cf.br ^done
^done:
  return
}
