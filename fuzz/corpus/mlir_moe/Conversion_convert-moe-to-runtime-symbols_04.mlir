llvm.func @moert_rank() -> i32
func.func @other_kind(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %s = moe.tp_slice %x tp = 2 : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return %s : tensor<?x64xf32>
}
