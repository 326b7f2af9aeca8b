func.func @uniform_conditions(%phase: i1 {moe.uniform}, %x: tensor<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %yes = arith.cmpi eq, %c0, %c1 : index
  scf.if %phase {
    %n = moe.agree_count %c1 : index
  }
  scf.if %yes {
    %n = moe.agree_count %c0 : index
  }
  return
}
