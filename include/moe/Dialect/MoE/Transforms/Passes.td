//===- Passes.td - moe transformation passes ----------------*- tablegen -*-===//
#ifndef MOE_DIALECT_MOE_TRANSFORMS_PASSES_TD
#define MOE_DIALECT_MOE_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def MoEDecomposeLayer : Pass<"moe-decompose-layer"> {
  let summary = "Split moe.layer into route, dispatch, expert GEMMs and combine";
  let description = [{
    Replaces every `moe.layer` by its steps, so that planning passes and
    lowerings work on one concern at a time. A shared expert becomes a
    one-expert `moe.grouped_matmul` pair whose output is added to the
    combined result (scaled per token by `sigmoid(shared_gate . x)` when the
    layer has a shared gate).

    Before:
    ```mlir
    %y = moe.layer %x router(%wr) experts(%w13, %w2)
           routing <softmax, top_k = 2, normalize> activation swiglu
           layout <ep = 1, tp = 1> : (...) -> tensor<?x64xf32>
    ```
    After:
    ```mlir
    %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2, normalize> : ...
    %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8 : ...
    %h = moe.grouped_matmul %rows, %w13, %re : ...
    %a = moe.activation %h kind swiglu : ...
    %o = moe.grouped_matmul %a, %w2, %re : ...
    %y = moe.combine %o, %slot, %w : ...
    ```
  }];
  let options = [
    Option<"rowTile", "row-tile", "int64_t", "1",
           "Pad each expert's dispatched rows to a multiple of this (the row "
           "tile of the expert GEMM; 1: no padding, what the CPU GEMM wants)">,
    Option<"activateAllRows", "activate-all-rows", "bool", "false",
           "Activate every dispatched row, padding included (zeros), rather "
           "than the first offsets[E]: no row count is read back from the "
           "dispatch (on a GPU its host cannot read it)">,
    Option<"staticReceived", "static-received", "bool", "false",
           "With ep > 1, receive into static buffers (what a GPU's workspace "
           "needs): the prefill layout's `capacity` rows, masked past the "
           "received ones, and the row tile in the decode layout too">,
    Option<"sharedFirst", "shared-first", "bool", "false",
           "Build the shared expert before the routing, its GEMMs and "
           "activation marked `moe.side_stream`: on a GPU they run on a second "
           "stream beside the routing, dispatch and routed experts "
           "(moe-gpu-side-stream)">,
  ];
  let dependentDialects = ["::mlir::tensor::TensorDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::arith::ArithDialect"];
  let statistics = [
    Statistic<"numLayers", "num-layers", "Number of moe.layer ops decomposed">
  ];
}

def MoEPlanChunks : Pass<"moe-plan-chunks"> {
  let summary = "Chunk MoE layers so their buffers fit an activation-memory budget";
  let description = [{
    For each `moe.layer`, computes the bytes of MoE buffers one token needs
    (router temporaries, dispatch rows, expert intermediates of tokens x top-k
    x 2 x intermediate, combine rows, shared expert: `moeBytesPerToken`) and
    the largest chunk that fits `budget-bytes`. When a rank's
    `max-tokens-per-rank` tokens do not fit at once, the layer is wrapped in a
    `moe.chunk_loop`; with `ep > 1` the loop is `agreed`: its trip count is
    the maximum over the EP group (one small all-reduce), so every rank joins
    every collective and ranks with fewer chunks run empty chunks. The
    decision is recorded as `moe.chunk_plan` for the plan report.

    Before:
    ```mlir
    %y = moe.layer %x ... layout <ep = 2, tp = 1> {max_tokens_per_rank = 4096 : i64}
    ```
    After (budget for 256 tokens):
    ```mlir
    %y = moe.chunk_loop %x chunk_size = 256 agreed : (...) -> tensor<?x64xf32> {
    ^bb0(%chunk: tensor<?x64xf32>):
      %c = moe.layer %chunk ... {max_tokens_per_rank = 256 : i64}
      moe.yield %c : tensor<?x64xf32>
    } {moe.chunk_plan = {bytes_per_token = ..., chunk_size = 256, max_chunks = 16}}
    ```
  }];
  let options = [
    Option<"budgetBytes", "budget-bytes", "int64_t", /*default=*/"0",
           "Activation-memory budget for the MoE buffers of one layer, in bytes">,
    Option<"maxTokensPerRank", "max-tokens-per-rank", "int64_t", /*default=*/"4096",
           "Most tokens a rank holds (layers with ep > 1 carry their own)">
  ];
  let statistics = [
    Statistic<"numChunked", "num-chunked", "Number of layers wrapped in a chunk loop">
  ];
}

def MoEVerifyCollectives : Pass<"moe-verify-collectives"> {
  let summary = "Prove that every rank issues the same collectives in the same order";
  let description = [{
    Rejects a collective (`moe.ep_dispatch`, `moe.ep_combine`,
    `moe.agree_count`, `moe.tp_gather`, a call of a `moert_` runtime
    collective, or a call of a function that issues any of these, itself or
    through its calls) that sits
    under control flow which can differ between ranks:

    * an `scf.if` / `cf.cond_br` whose condition is rank-dependent;
    * an `scf.for` whose bounds or step are rank-dependent;
    * a `moe.chunk_loop` that is not `agreed`;
    * loops whose trip count cannot be analysed (`scf.while`, parallel loops).

    A value is rank-uniform when it is a constant, the result of
    `moe.agree_count` (a maximum over the group), an argument marked
    `moe.uniform`, or computed by side-effect-free ops from uniform values;
    everything else (tokens, their counts, received rows) is rank-local.
    Runs inside the CPU and CUDA pipelines.

    Rejected:
    ```mlir
    %t = tensor.dim %x, %c0 : tensor<?x64xf32>
    %c = arith.cmpi sgt, %t, %c0 : index
    scf.if %c {   // error: rank-local condition
      %r:4 = moe.ep_dispatch ...
    }
    ```
    Accepted: the same loop bounded by `%n = moe.agree_count %local : index`.
  }];
  let statistics = [
    Statistic<"numCollectives", "num-collectives", "Collectives checked">
  ];
}

def MoEFuseQuantDispatch : Pass<"moe-fuse-quant-dispatch"> {
  let summary = "Quantize activations to FP8 inside the expert-parallel dispatch";
  let description = [{
    Sets the quantization of every `moe.ep_dispatch` whose hidden size is a
    multiple of the scheme's group: the dispatch's pack step then writes FP8
    E4M3 values and per-group scales straight into the send buffer (no
    separate quantize kernel, no BF16 copy on the wire). Where the received
    rows feed the local `moe.dispatch` and then the gate/up
    `moe.grouped_matmul` (what `moe-decompose-layer` builds), the experts
    take the FP8 codes as they arrived: the dispatch returns i8 codes and f32
    scales, both are permuted by `moe.dispatch`, and the GEMM reads
    `e4m3(code) * scale`; no dequantized copy of the rows is made. Otherwise
    (or with `gemm-consumes-fp8=false`) the receiver dequantizes. Dispatches
    that cannot take the scheme are left alone with a remark.

    Before:
    ```mlir
    %r, %ids, %w, %h = moe.ep_dispatch %x, %e, %p, %rank capacity = 64 : ...
    %rows, %re, %slot = moe.dispatch %r, %ids num_experts = 4 : ...
    %g = moe.grouped_matmul %rows, %w13, %re : ...
    ```
    After (`scheme=fp8-e4m3-g128`):
    ```mlir
    %q, %s, %ids, %w, %h = moe.ep_dispatch %x, %e, %p, %rank capacity = 64
        quantization fp8_e4m3_g128 : (...) -> (tensor<?x256xi8>, tensor<?x2xf32>, ...)
    %qrows, %re, %slot = moe.dispatch %q, %ids num_experts = 4 : ...
    %srows, %re2, %slot2 = moe.dispatch %s, %ids num_experts = 4 : ...
    %g = moe.grouped_matmul %qrows, %w13, %re scales %srows : ...
    ```
  }];
  let options = [
    Option<"scheme", "scheme", "std::string", /*default=*/"\"fp8-e4m3-g128\"",
           "fp8-e4m3-g128 (f32 scale per 128) or fp8-e4m3-g32-ue8m0 "
           "(power-of-two scale per 32)">,
    Option<"gemmConsumesFp8", "gemm-consumes-fp8", "bool", /*default=*/"true",
           "Let the expert GEMM read the FP8 codes and scales (false: the "
           "receiver dequantizes)">
  ];
  let statistics = [
    Statistic<"numFused", "num-fused", "Dispatches that quantize in their pack step">
  ];
}

def MoEDedupeTpDispatch : Pass<"moe-dedupe-tp-dispatch"> {
  let summary = "Dispatch each token once per tensor-parallel group, not once per TP rank";
  let description = [{
    With `tp > 1` the `tp` ranks of a tensor-parallel group hold the same
    tokens, so a plain layer dispatches every token `tp` times. This pass
    gives each TP rank a `1/tp` slice of the tokens (`moe.tp_slice`), runs the
    whole layer on the slice — routed and shared experts alike, so the shared
    expert is computed on exactly the tokens it is added to — and gathers the
    slices back (`moe.tp_gather`), so every TP rank gets the full output.
    Slicing rather than a single dispatching leader keeps every TP rank's
    links and experts busy and needs no broadcast afterwards. Layers with
    `tp = 1` are left alone. The decision is recorded as `moe.tp_plan`.

    Before:
    ```mlir
    %y = moe.layer %x ... layout <ep = 4, tp = 2> {max_tokens_per_rank = 64 : i64}
    ```
    After:
    ```mlir
    %s = moe.tp_slice %x tp = 2 : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %l = moe.layer %s ... layout <ep = 4, tp = 1> {max_tokens_per_rank = 32 : i64}
    %y = moe.tp_gather %l, %x tp = 2 {moe.tp_plan = {mode = "slice", tp = 2 : i64}}
      : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    ```
  }];
  let statistics = [
    Statistic<"numDeduped", "num-deduped", "Layers whose dispatch is split over TP ranks">
  ];
}

def MoESpecializePhase : Pass<"moe-specialize-phase", "::mlir::ModuleOp"> {
  let summary = "Compile a prefill and a decode variant of each MoE function, and an entry that picks one";
  let description = [{
    Prefill batches are large and uneven: counts travel first and the experts
    see packed, expert-contiguous rows. Decode steps are small and latency
    bound: a fixed layout (every rank sends every rank `decode-max-tokens`
    slots, each expert owns a fixed capacity of masked rows) has static
    shapes and never reads received counts on the host. For every public
    function `@f` holding `moe.layer` ops this pass makes `@f_prefill` and
    `@f_decode` (layers marked `phase = prefill` / `phase = decode`, the
    latter with `max_tokens_per_rank` at most `decode-max-tokens`) and turns
    `@f` into an entry with one more argument, `phase: i32 {moe.uniform}`:
    1 runs prefill, 2 runs decode, 0 decides by the token threshold — decode
    when the most tokens any rank of the EP group holds (`moe.agree_count`,
    so all ranks choose alike) is at most `decode-max-tokens`. Other values
    fail. The layer's input must be an argument of `@f`. The decision is
    recorded as `moe.phase_plan`.

    Before:
    ```mlir
    func.func @f(%x: tensor<?x64xf32>, ...) -> tensor<?x64xf32> {
      %y = moe.layer %x ... layout <ep = 2, tp = 1> {max_tokens_per_rank = 4096 : i64}
    ```
    After (`decode-max-tokens=8`):
    ```mlir
    func.func @f_prefill(%x: tensor<?x64xf32>, ...) -> tensor<?x64xf32> {
      %y = moe.layer %x ... {max_tokens_per_rank = 4096 : i64, phase = #moe<phase prefill>}
    func.func @f_decode(%x: tensor<?x64xf32>, ...) -> tensor<?x64xf32> {
      %y = moe.layer %x ... {max_tokens_per_rank = 8 : i64, phase = #moe<phase decode>}
    func.func @f(%x: tensor<?x64xf32>, ..., %phase: i32 {moe.uniform}) -> tensor<?x64xf32> {
      %decode = scf.if %auto -> (i1) {   // phase == 0
        %most = moe.agree_count %tokens : index
        scf.yield (%most <= 8)
      } else { scf.yield (%phase == 2) }
      %y = scf.if %decode { call @f_decode(...) } else { call @f_prefill(...) }
    ```
  }];
  let options = [
    Option<"decodeMaxTokens", "decode-max-tokens", "int64_t", /*default=*/"0",
           "Most tokens per rank the decode variant takes; the automatic "
           "threshold (must be > 0)">
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::cf::ControlFlowDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect"];
  let statistics = [
    Statistic<"numSpecialized", "num-specialized", "Functions split into prefill and decode">
  ];
}

def MoEDropPhaseVariants : Pass<"moe-drop-phase-variants", "::mlir::ModuleOp"> {
  let summary = "Erase the phase variants that nothing calls once inlined";
  let description = [{
    After `inline` has put `@f_prefill` and `@f_decode` (named by
    `moe.phase_plan`, `moe-specialize-phase`) into their entry `@f`, the
    variants are no longer called; left in the module they would be compiled
    and exported a second time (on the GPU target, every kernel thrice). This
    pass erases each variant that has no symbol use left. A variant still
    called stays.
  }];
  let statistics = [
    Statistic<"numDropped", "num-dropped", "Phase variants erased">
  ];
}

def MoEPlanBuffers : Pass<"moe-plan-buffers"> {
  let summary = "Size every dispatch workspace statically from declared maxima";
  let description = [{
    Production engines size their dispatch buffers by hand and overflow them
    when a batch is larger than expected. Here every `moe.ep_dispatch` gets
    its workspaces computed from the declared maxima (tokens per rank or per
    chunk, `ep`, top-k, hidden size, wire bytes per row after quantization,
    capacity, decode slots: `planWorkspaces`) and recorded as
    `moe.workspaces`; `convert-moe-to-runtime` hands the sizes to the
    runtime, which allocates each workspace once at that size and checks
    every request against it before writing (a rank over its token maximum
    fails every rank first). Run after `moe-fuse-quant-dispatch`, which
    changes the bytes of a row. A dispatch without `ep` or `max_tokens`
    cannot be sized and is an error.

    Before:
    ```mlir
    %r:4 = moe.ep_dispatch %x, %ids, %w, %er capacity = 512 ep = 2 max_tokens = 256 : ...
    ```
    After:
    ```mlir
    %r:4 = moe.ep_dispatch %x, %ids, %w, %er capacity = 512 ep = 2 max_tokens = 256
      {moe.workspaces = {combine.recv = 32768 : i64, dispatch.recv = 40960 : i64,
                         dispatch.send = 40960 : i64, expert.rows = 32768 : i64}} : ...
    ```
  }];
  let statistics = [
    Statistic<"numPlanned", "num-planned", "Dispatches whose workspaces were sized">
  ];
}

#endif // MOE_DIALECT_MOE_TRANSFORMS_PASSES_TD
