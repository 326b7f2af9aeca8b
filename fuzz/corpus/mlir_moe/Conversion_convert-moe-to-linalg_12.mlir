func.func @activation_clamped(%h: tensor<?x16xf32>) -> tensor<?x8xf32> {
  %a = moe.activation %h kind clamped_swiglu {swiglu_alpha = 1.702 : f32, swiglu_limit = 2.5 : f32}
    : (tensor<?x16xf32>) -> tensor<?x8xf32>
  return %a : tensor<?x8xf32>
}
