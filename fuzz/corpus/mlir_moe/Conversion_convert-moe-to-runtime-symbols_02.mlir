func.func @moert_agree_max(%a: i64, %b: i64) -> i64 {
  return %a : i64
}
func.func @defined(%t: index) -> index {
  %n = moe.agree_count %t : index
  return %n : index
}
