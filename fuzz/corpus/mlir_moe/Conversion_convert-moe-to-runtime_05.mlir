func.func @agree(%n: index) -> (index, index) {
  %t = moe.agree_count %n for phase_tokens : index
  %c = moe.agree_count %n : index
  return %t, %c : index, index
}
