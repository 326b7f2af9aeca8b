func.func @moert_ep_combine_bf16(%p: tensor<?x64xbf16>, %h: i64) -> tensor<?x64xbf16> {
  %y = moe.ep_combine %p, %h : (tensor<?x64xbf16>, i64) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
