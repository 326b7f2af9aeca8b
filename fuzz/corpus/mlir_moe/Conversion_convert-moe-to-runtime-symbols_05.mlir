func.func private @moert_agree_max(i64, i64) -> i64 attributes {llvm.emit_c_interface}
func.func @scalar_reuse(%t: index) -> index {
  %n = moe.agree_count %t : index
  return %n : index
}
