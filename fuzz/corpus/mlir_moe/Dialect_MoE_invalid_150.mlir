func.func @act_c3(%h: tensor<?x64xf32>) {
  %a = moe.activation %h kind clamped_swiglu {swiglu_alpha = 1.702 : f32, swiglu_limit = -1.0 : f32}
      : (tensor<?x64xf32>) -> tensor<?x32xf32>
  return
}
