//===- MoEOps.td - moe operations ---------------------------*- tablegen -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOEOPS_TD
#define MOE_DIALECT_MOE_IR_MOEOPS_TD

include "moe/Dialect/MoE/IR/MoEAttrs.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def MoE_FloatTensor : RankedTensorOf<[F32, BF16]>;
def MoE_I32Tensor : RankedTensorOf<[I32]>;
def MoE_F32Tensor : RankedTensorOf<[F32]>;
// Rows as they travel to the experts: activations, or FP8 E4M3 codes (i8
// bits, e4m3fn) whose per-group f32 scales travel beside them.
def MoE_RowsTensor : RankedTensorOf<[F32, BF16, I8]>;
// Expert weights: floats, or FP8 E4M3 codes (i8 bits) with f32 block scales.
def MoE_WeightTensor : RankedTensorOf<[F32, BF16, I8]>;

//===----------------------------------------------------------------------===//
// moe.layer
//===----------------------------------------------------------------------===//

def MoE_LayerOp : MoE_Op<"layer", [Pure, AttrSizedOperandSegments]> {
  let summary = "A whole MoE block: router, routed experts, optional shared expert";
  let description = [{
    Computes `y[T,H]` from `x[T,H]`. The router weight is `[E,H]`. Expert
    weights are in HuggingFace's (out, in) layout: `w13[E, 2I, H]` holds each
    expert's gate projection (rows `0..I`) and up projection (rows `I..2I`),
    `w2[E, H, I]` its down projection. For a token `t` routed to experts `e_j`
    with weights `w_j`:

    `y[t] = sum_j w_j * w2[e_j] . act(w13[e_j] . x[t])  (+ shared(x[t]))`

    where `act(g, u) = silu(g) * u` for SwiGLU. The optional shared expert
    (`shared_w13[2Is, H]`, `shared_w2[H, Is]`) is applied to every token and
    added; with `shared_gate[1, H]` (Qwen2-MoE) its output for token `t` is
    first scaled by `sigmoid(shared_gate . x[t])`. With `score_input`
    (Llama 4, `top_k = 1`) the routing weight scales the expert's input
    instead of its output: `y[t] = w2[e] . act(w13[e] . (w * x[t]))`.
    Arithmetic is done in f32 and the result rounded to `x`'s element type.

    gpt-oss adds three things. `router_bias[E]` (f32) is added to the
    router's logits before scoring, so it moves both the choice and the
    weights. `w13_bias[E, 2I]` and `w2_bias[E, H]` are added to the outputs
    of the two expert GEMMs (each GEMM's result is rounded to the element
    type first, as a bf16 model's `x @ w + b` is). `clamped_swiglu` with
    `swiglu_alpha = a` and `swiglu_limit = L` (f32 attributes) computes
    `g' * sigmoid(a * g') * (clamp(u, -L, L) + 1)` with `g' = min(g, L)`.

    With `ep > 1` the op describes one rank: `x` holds this rank's tokens,
    `w13`/`w2` its `E/ep` local experts, `expert_rank[E]` (i32) the rank that
    owns each expert, and `max_tokens_per_rank` bounds the tokens of any rank
    (the planned capacity is `max_tokens_per_rank * ep` received rows).
    Instead of `expert_rank`, a placement from the load balancer may be given
    as runtime tensors: `phys_to_log[P]` (i32) names the logical expert of
    each of the `P` physical slots, slot `p` living on rank `p / (P/ep)`, and
    `replica_share[P]` (f32) the share of its expert's tokens each slot takes.
    A rank then holds `P/ep` slots (`w13[P/ep, 2I, H]`), and a token's choice
    goes to one replica of its expert, picked from the shares by the choice's
    index (see `moe.ep_dispatch`); with `per_batch_replicas`, from the batch's
    expert counts on all ranks instead.
    With `weight_scales(%w13_scale, %w2_scale)` the routed experts' weights
    are FP8 E4M3 codes (i8 bits, DeepSeek-V3's checkpoint format): weight
    element `[e, m, k]` is `e4m3(w[e, m, k]) * scale[e, m / bm, k / bk]`
    for `weight_block = array<i64: bm, bk>`, so `w13_scale` is
    `[E, ceil(2I / bm), ceil(H / bk)]` and `w2_scale` `[E, ceil(H / bm),
    ceil(I / bk)]` (f32). Codes 0x7F and 0xFF (NaN) are not valid weights.
    `phase = decode` (set by `moe-specialize-phase`) selects the decode
    layout: at most `max_tokens_per_rank` tokens, fixed capacity per expert,
    masked rows, no counts exchanged; without it (or with `prefill`) counts
    travel first and the experts see packed, expert-contiguous rows.
    Rules: `size_c1`, `layer_c1`..`layer_c16` and the expert-count rules of
    `#moe.routing` (`route_c2`..`route_c7`, `route_c9`), see
    docs/MoEVerifierRules.md. Sizes are bounded by moe/Support/Limits.h.

    ```mlir
    %y = moe.layer %x router(%wr) experts(%w13, %w2)
           routing <softmax, top_k = 2, normalize> activation swiglu
           layout <ep = 1, tp = 1>
         : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
            tensor<8x64x32xf32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins
    MoE_FloatTensor:$x,
    MoE_FloatTensor:$router_weight,
    Optional<MoE_F32Tensor>:$correction_bias,
    Optional<MoE_F32Tensor>:$router_bias,
    MoE_WeightTensor:$w13,
    MoE_WeightTensor:$w2,
    Optional<MoE_F32Tensor>:$w13_scale,
    Optional<MoE_F32Tensor>:$w2_scale,
    Optional<MoE_FloatTensor>:$w13_bias,
    Optional<MoE_FloatTensor>:$w2_bias,
    Optional<MoE_FloatTensor>:$shared_w13,
    Optional<MoE_FloatTensor>:$shared_w2,
    Optional<MoE_FloatTensor>:$shared_gate,
    Optional<MoE_I32Tensor>:$expert_rank,
    Optional<MoE_I32Tensor>:$phys_to_log,
    Optional<MoE_F32Tensor>:$replica_share,
    MoE_RoutingAttr:$routing,
    MoE_ActivationAttr:$activation,
    MoE_LayoutAttr:$layout,
    OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$max_tokens_per_rank,
    OptionalAttr<MoE_PhaseAttr>:$phase,
    UnitAttr:$score_input,
    OptionalAttr<F32Attr>:$swiglu_alpha,
    OptionalAttr<F32Attr>:$swiglu_limit,
    UnitAttr:$per_batch_replicas,
    OptionalAttr<DenseI64ArrayAttr>:$weight_block
  );
  let results = (outs MoE_FloatTensor:$y);
  let assemblyFormat = [{
    $x `router` `(` $router_weight (`bias` $correction_bias^)?
    (`logit_bias` $router_bias^)? `)`
    `experts` `(` $w13 `,` $w2 (`weight_scales` `(` $w13_scale^ `,` $w2_scale `)`)?
    (`biases` `(` $w13_bias^ `,` $w2_bias `)`)? `)`
    (`shared` `(` $shared_w13^ `,` $shared_w2 `)`)?
    (`shared_gate` `(` $shared_gate^ `)`)?
    (`expert_rank` `(` $expert_rank^ `)`)?
    (`placement` `(` $phys_to_log^ `,` $replica_share `)`)?
    (`per_batch_replicas` $per_batch_replicas^)?
    `routing` $routing `activation` custom<ActivationKeyword>($activation) (`score_input` $score_input^)?
    `layout` $layout
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// moe.route
//===----------------------------------------------------------------------===//

def MoE_RouteOp : MoE_Op<"route", [Pure, AttrSizedOperandSegments]> {
  let summary = "Router: logits from x, then top-k expert ids and weights";
  let description = [{
    Computes `logits[T,E] = x . router_weight^T` in f32, scores and selection
    as `#moe.routing` describes, and returns for each token the `top_k`
    expert ids (best first; ties go to the lower expert id) and their weights.
    With `logit_bias[E]` (f32, gpt-oss) the bias is added to the logits
    before anything else reads them.

    ```mlir
    %ids, %weights = moe.route %x, %wr bias %b
        routing <sigmoid, top_k = 8, n_group = 8, topk_group = 4, normalize,
                 scale = 2.5, correction_bias>
      : (tensor<?x64xf32>, tensor<32x64xf32>, tensor<32xf32>)
        -> (tensor<?x8xi32>, tensor<?x8xf32>)
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$x, MoE_FloatTensor:$router_weight,
                       Optional<MoE_F32Tensor>:$correction_bias,
                       Optional<MoE_F32Tensor>:$logit_bias,
                       MoE_RoutingAttr:$routing);
  let results = (outs MoE_I32Tensor:$expert_ids, MoE_F32Tensor:$expert_weights);
  let assemblyFormat = [{
    $x `,` $router_weight (`bias` $correction_bias^)?
    (`logit_bias` $logit_bias^)? `routing` $routing
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// moe.dispatch
//===----------------------------------------------------------------------===//

def MoE_DispatchOp : MoE_Op<"dispatch", [Pure]> {
  let summary = "Sends each (token, choice) to its expert, expert-contiguous";
  let description = [{
    Produces one row per (token, choice): `dispatched[N,H]` with `N = T*k`,
    rows sorted by expert and, within an expert, by (token, choice).
    `row_expert[N]` is the expert of each row; `slot[T,k]` is the row that
    holds the j-th choice of token t, which `moe.combine` uses to bring the
    results back. With one expert-parallel rank this is a local permutation.

    With `row_tile = R` each expert's rows are padded to a multiple of R
    (the layout a GEMM with row tiles of R wants: every tile holds rows of
    one expert), so `N = T*k + min(num_experts, T*k)*(R-1)` rows at most
    (at most that many experts receive a row); padding rows
    are zero with `row_expert = -1`. A negative id marks a (token, choice)
    that is not for this rank (see `moe.ep_dispatch`): it gets no row and
    `slot = -1`; unused rows at the end are zero with `row_expert = -1`.
    The optional result `expert_offsets[num_experts + 1]` gives where each
    expert's block of rows starts (exclusive prefix sums of the padded
    counts; the last entry ends the used rows): the rows of expert `e` come
    first in `[offsets[e], offsets[e+1])`, padding after them.

    With `capacity = C` the layout is masked instead (the decode layout):
    `dispatched` has `num_experts * C` rows, expert `e` owns rows
    `[e*C, (e+1)*C)`, its choices first in (token, choice) order and the rest
    zero with `row_expert = -1`; a negative id gets `slot = -1`. Shapes are
    static, and no count decides a size. `T <= C` must hold (each token meets
    an expert at most once); the lowering checks it when `T` is dynamic.
    `expert_offsets[e]` is then `e*C`, and `row_tile` must divide `C`.

    ```mlir
    %rows, %row_expert, %slot = moe.dispatch %x, %ids num_experts = 8
      : (tensor<?x64xf32>, tensor<?x2xi32>)
        -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>)
    ```
  }];
  let arguments = (ins MoE_RowsTensor:$x, MoE_I32Tensor:$expert_ids,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_experts,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$capacity,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$row_tile);
  let results = (outs MoE_RowsTensor:$dispatched, MoE_I32Tensor:$row_expert,
                      MoE_I32Tensor:$slot, Optional<MoE_I32Tensor>:$expert_offsets);
  let assemblyFormat = [{
    $x `,` $expert_ids `num_experts` `=` $num_experts
    (`capacity` `=` $capacity^)? (`row_tile` `=` $row_tile^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// Rows per tile of the layout (1: no padding).
    int64_t getRowTileOrOne() { return getRowTile() ? int64_t(*getRowTile()) : 1; }
    /// Rows of the padded layout for `pairs` = T*k choices: at most
    /// min(E, T*k) experts receive a row, each padded by at most R - 1.
    static int64_t paddedRows(int64_t pairs, int64_t numExperts, int64_t rowTile) {
      return pairs + std::min(numExperts, pairs) * (rowTile - 1);
    }
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// moe.grouped_matmul
//===----------------------------------------------------------------------===//

def MoE_GroupedMatmulOp : MoE_Op<"grouped_matmul", [Pure, AttrSizedOperandSegments]> {
  let summary = "One GEMM per expert over the rows assigned to it";
  let description = [{
    `result[r, m] = sum_k input[r, k] * weight[row_expert[r], m, k]`, with
    `input[N,K]`, `weight[E,M,K]` (HuggingFace's out x in layout) and
    `row_expert[N]`. Accumulates in f32 and rounds to the element type. A
    row whose expert is not in `[0, E)` (a row not for this rank) gives 0.
    With `scales`, `input` holds FP8 E4M3 codes (i8 bits) and `scales[N, G]`
    one f32 scale per group of `K/G` elements: the GEMM reads
    `e4m3(input[r, k]) * scales[r, k / (K/G)]`, so quantized rows from the
    dispatch are consumed as they arrived; the result has the weight's type.
    With `weight_scales` the weight holds FP8 E4M3 codes (i8 bits) in blocks
    of `weight_block = array<i64: bm, bk>`: the GEMM reads
    `e4m3(weight[e, m, k]) * weight_scales[e, m / bm, k / bk]`
    (`weight_scales[E, ceil(M / bm), ceil(K / bk)]`, f32); the result's
    element type is then the compute type (f32 or bf16). Codes 0x7F and
    0xFF (NaN) are not valid weights.
    With `expert_offsets[E + 1]` (from `moe.dispatch`) the rows are grouped:
    expert `e`'s rows come first in `[offsets[e], offsets[e+1])`, rows of no
    expert after them; code generation then runs one GEMM per expert
    block, reusing its weights across the block's rows.

    ```mlir
    %h = moe.grouped_matmul %rows, %w13, %row_expert
      : (tensor<?x64xf32>, tensor<8x64x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins MoE_RowsTensor:$input, MoE_WeightTensor:$weight,
                       MoE_I32Tensor:$row_expert, Optional<MoE_F32Tensor>:$scales,
                       Optional<MoE_F32Tensor>:$weight_scales,
                       Optional<MoE_I32Tensor>:$expert_offsets,
                       OptionalAttr<DenseI64ArrayAttr>:$weight_block);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `,` $row_expert (`scales` $scales^)?
    (`weight_scales` $weight_scales^)? (`offsets` $expert_offsets^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// moe.activation
//===----------------------------------------------------------------------===//

def MoE_ActivationOp : MoE_Op<"activation", [Pure]> {
  let summary = "Gated activation of the first expert GEMM's output";
  let description = [{
    For SwiGLU, `input[N, 2I]` holds the gate in columns `0..I` and the up
    projection in `I..2I`; `result[N, I] = silu(gate) * up`. For
    `clamped_swiglu` (gpt-oss) the attributes `swiglu_alpha = a` and
    `swiglu_limit = L` are required and
    `result = g' * sigmoid(a * g') * (clamp(up, -L, L) + 1)`,
    `g' = min(gate, L)`.

    ```mlir
    %a = moe.activation %h kind swiglu : (tensor<?x64xf32>) -> tensor<?x32xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$input, MoE_ActivationAttr:$kind,
                       OptionalAttr<F32Attr>:$swiglu_alpha,
                       OptionalAttr<F32Attr>:$swiglu_limit);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input `kind` custom<ActivationKeyword>($kind) attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// moe.combine
//===----------------------------------------------------------------------===//

def MoE_CombineOp : MoE_Op<"combine", [Pure]> {
  let summary = "Weighted sum of each token's expert outputs";
  let description = [{
    `result[t, h] = sum_j weights[t, j] * expert_out[slot[t, j], h]`: the
    inverse of `moe.dispatch`, using its `slot` map. A negative slot (a choice
    another rank computes, in the masked layout) adds nothing.

    ```mlir
    %y = moe.combine %out, %slot, %weights
      : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$expert_out, MoE_I32Tensor:$slot,
                       MoE_F32Tensor:$weights);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $expert_out `,` $slot `,` $weights attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// moe.ep_dispatch / moe.ep_combine
//===----------------------------------------------------------------------===//

def MoE_EpDispatchOp : MoE_Op<"ep_dispatch", [AttrSizedOperandSegments]> {
  let summary = "Sends each token once to every expert-parallel rank it needs";
  let description = [{
    Across the expert-parallel group: for each token, one row goes to each
    distinct rank that owns one of its experts (`expert_rank[e]`), carrying
    the token, the local index of each choice on that rank (-1 for choices
    owned elsewhere) and its weight (0 where the id is -1). Counts are
    exchanged first; a rank that would receive more than `capacity` rows
    fails on every rank before anything is written. Returns the received
    rows, their local ids and weights, and a handle for `moe.ep_combine`.
    With a placement (`phys_to_log[P]`, `replica_share[P]` instead of
    `expert_rank`), rank `r` owns slots `[r*S, (r+1)*S)`, `S = P/ep`, and
    the n-th choice of logical expert `e` on this rank (in token, choice
    order) goes to the replica whose interval of cumulative shares holds
    `frac((n + 0.5) * 0.6180339887)`: deterministic, stateless given `n`, and
    in proportion to the shares. Replicas with share 0 get nothing.
    With `per_batch_replicas` the shares are not read: the ranks all-gather
    each one's choices per expert, every rank computes the same split of
    each replicated expert's choices over its replicas that makes the
    batch's most loaded rank least loaded (an integer max flow), and rank
    `r`'s choices of an expert fill that split's replicas in rank order,
    after those of ranks `0..r-1`.
    With `quantization`, the pack step quantizes each row to FP8 E4M3 with
    per-group scales (`fp8_e4m3_g128`: groups of 128, f32 scales;
    `fp8_e4m3_g32_ue8m0`: groups of 32, power-of-two scales rounded up) so
    only FP8 payload and scales travel; the received rows are dequantized,
    or, with an i8 `received` and a `received_scales[R, H/group]` result
    (set up by `moe-fuse-quant-dispatch`), kept as E4M3 codes with f32
    scales for the expert GEMM to consume.
    With a placement, `experts`, when given, is the number of logical
    experts: the runtime refuses a `phys_to_log` naming another one (a
    placement planned for another model) and ids outside it.
    `max_tokens` bounds every rank's tokens: a rank over it fails every rank
    before anything is written. With `slots = S` (the decode layout) no
    counts travel: every rank sends every rank a block of `S` rows, valid
    ones first and the rest masked (ids -1, weights 0, x 0), so `R = ep * S`
    is static; `max_tokens` is then `S`. Without `slots`, `R` is dynamic
    (the received rows), or static and equal to `capacity`: the rows past
    the received ones are masked as above (the form a GPU's static
    workspace takes, `convert-moe-to-runtime{into-buffers}`). `ep`, when
    given, is the size of the group (the runtime checks it) and lets `moe-plan-buffers` size the
    workspaces (`moe.workspaces`). Lowered to the runtime
    (`convert-moe-to-runtime`), which checks every request against them.

    ```mlir
    %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %expert_rank capacity = 256
      : (tensor<?x64xf32>, tensor<?x4xi32>, tensor<?x4xf32>, tensor<16xi32>)
        -> (tensor<?x64xf32>, tensor<?x4xi32>, tensor<?x4xf32>, i64)
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$x, MoE_I32Tensor:$expert_ids,
                       MoE_F32Tensor:$expert_weights,
                       Optional<MoE_I32Tensor>:$expert_rank,
                       Optional<MoE_I32Tensor>:$phys_to_log,
                       Optional<MoE_F32Tensor>:$replica_share,
                       ConfinedAttr<I64Attr, [IntPositive]>:$capacity,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$ep,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$max_tokens,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$slots,
                       OptionalAttr<MoE_DispatchQuantizationAttr>:$quantization,
                       UnitAttr:$per_batch_replicas,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$experts);
  let results = (outs MoE_RowsTensor:$received,
                      Optional<MoE_F32Tensor>:$received_scales,
                      MoE_I32Tensor:$local_ids, MoE_F32Tensor:$local_weights,
                      I64:$handle);
  let assemblyFormat = [{
    $x `,` $expert_ids `,` $expert_weights (`,` $expert_rank^)?
    (`placement` `(` $phys_to_log^ `,` $replica_share `)`)?
    (`per_batch_replicas` $per_batch_replicas^)? `capacity` `=` $capacity
    (`ep` `=` $ep^)? (`max_tokens` `=` $max_tokens^)? (`slots` `=` $slots^)?
    (`experts` `=` $experts^)?
    (`quantization` $quantization^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def MoE_EpCombineOp : MoE_Op<"ep_combine"> {
  let summary = "Returns each received row's result to its token's rank and sums";
  let description = [{
    The inverse of `moe.ep_dispatch` named by `handle`: `partial[R, H]` holds
    one row per received row (already weighted and summed over the local
    choices); each goes back to the token's rank, which adds the rows of a
    token in rank order. The result has this rank's tokens.

    ```mlir
    %y = moe.ep_combine %partial, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$partial, I64:$handle);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $partial `,` $handle attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// moe.tp_slice / moe.tp_gather
//===----------------------------------------------------------------------===//

def MoE_TpSliceOp : MoE_Op<"tp_slice", [Pure]> {
  let summary = "This rank's share of the tokens its tensor-parallel group holds";
  let description = [{
    The `tp` ranks of a tensor-parallel group (consecutive ranks) hold the
    same `x[T,H]`; the rank with TP index `j = rank % tp` takes rows
    `[j*c, min((j+1)*c, T))` with `c = ceil(T / tp)` (possibly none).

    ```mlir
    %mine = moe.tp_slice %x tp = 2 : (tensor<?x64xf32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$x, ConfinedAttr<I64Attr, [IntPositive]>:$tp);
  let results = (outs MoE_FloatTensor:$slice);
  let assemblyFormat = "$x `tp` `=` $tp attr-dict `:` functional-type($x, $slice)";
  let hasVerifier = 1;
}

def MoE_TpGatherOp : MoE_Op<"tp_gather"> {
  let summary = "All-gather of the tensor-parallel group's slices back to [T,H]";
  let description = [{
    A collective within each tensor-parallel group: every rank contributes
    the rows it computed for its `moe.tp_slice` of `full` and receives all
    `T` rows (`full` gives `T`; its values are not read).

    ```mlir
    %y = moe.tp_gather %mine_y, %x tp = 2
      : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$slice, MoE_FloatTensor:$full,
                       ConfinedAttr<I64Attr, [IntPositive]>:$tp);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $slice `,` $full `tp` `=` $tp attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// moe.chunk_loop, moe.yield, moe.agree_count
//===----------------------------------------------------------------------===//

def MoE_ChunkLoopOp : MoE_Op<"chunk_loop", [RecursiveMemoryEffects]> {
  let summary = "Runs its body over chunks of at most chunk_size tokens";
  let description = [{
    Splits `x[T,H]` into `ceil(T / chunk_size)` chunks (one split, no copy),
    runs the body on each (its argument is the chunk) and puts each chunk's
    yielded rows at the chunk's place in the result (one concatenation).
    With `agreed`, the trip count is the maximum over the expert-parallel
    group (`moe.agree_count`), so every rank joins every collective in the
    body: a rank with fewer chunks runs empty chunks (zero tokens), never
    compute on fake data. `moe-plan-chunks` creates it.

    ```mlir
    %y = moe.chunk_loop %x chunk_size = 256 agreed
        : (tensor<?x64xf32>) -> tensor<?x64xf32> {
    ^bb0(%chunk: tensor<?x64xf32>):
      %c = moe.layer %chunk ... : (...) -> tensor<?x64xf32>
      moe.yield %c : tensor<?x64xf32>
    }
    ```
  }];
  let arguments = (ins MoE_FloatTensor:$x,
                       ConfinedAttr<I64Attr, [IntPositive]>:$chunk_size,
                       UnitAttr:$agreed);
  let results = (outs MoE_FloatTensor:$y);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $x `chunk_size` `=` $chunk_size (`agreed` $agreed^)? attr-dict `:`
    functional-type($x, $y) $body
  }];
  let hasVerifier = 1;
}

def MoE_YieldOp : MoE_Op<"yield", [Pure, Terminator, ReturnLike,
                                   HasParent<"ChunkLoopOp">]> {
  let summary = "The rows a chunk_loop body produces for its chunk";
  let arguments = (ins MoE_FloatTensor:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
}

def MoE_AgreeCountOp : MoE_Op<"agree_count"> {
  let summary = "The maximum of a count over the expert-parallel group";
  let description = [{
    A collective: every rank passes its local count and gets the maximum over
    all ranks, so that loops bounded by it run the same number of times
    everywhere. `purpose` names the collective in the runtime's checks and
    counters: `chunks` (chunk loops, the default) or `phase_tokens` (the
    token count that picks prefill or decode). Lowered to `moert_agree_max`
    by `convert-moe-to-runtime`.

    ```mlir
    %n = moe.agree_count %local : index
    %t = moe.agree_count %tokens for phase_tokens : index
    ```
  }];
  let arguments = (ins Index:$local,
                       DefaultValuedAttr<MoE_AgreementAttr, "Agreement::chunks">:$purpose);
  let results = (outs Index:$agreed);
  let assemblyFormat = "$local (`for` $purpose^)? attr-dict `:` type($local)";
}

#endif // MOE_DIALECT_MOE_IR_MOEOPS_TD
