func.func @if_on_token_count(%x: tensor<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x64xf32>
  %any = arith.cmpi sgt, %t, %c0 : index
  scf.if %any {
    %n = moe.agree_count %t : index
  }
  return
}
