func.func @exps(%x: f32) -> (f32, f32) {
  %a = math.exp %x {moe.approximable} : f32
  %b = math.exp %x : f32
  return %a, %b : f32, f32
}
