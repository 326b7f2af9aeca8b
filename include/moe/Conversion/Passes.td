//===- Passes.td - moe conversion passes --------------------*- tablegen -*-===//
#ifndef MOE_CONVERSION_PASSES_TD
#define MOE_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertMoEToLinalg : Pass<"convert-moe-to-linalg"> {
  let summary = "Lower moe.route/dispatch/grouped_matmul/activation/combine to linalg";
  let description = [{
    Lowers the decomposed ops of one expert-parallel rank to `linalg.generic`
    on tensors (plus `tensor` and `arith`), so that the same IR bufferizes to
    CPU loops or maps to GPU kernels. Every step is data-parallel:

    * `moe.route`: router GEMM, scores, and a top-k written as ranks: expert
      `e` is the j-th choice when exactly j experts beat it (ties go to the
      lower id). Group-limited routing ranks groups the same way by the sum
      of their two best selection scores and masks the experts of the rest.
    * `moe.dispatch`: a stable counting sort by expert (counts, exclusive
      offsets, the position of each (token, choice) among its expert's rows),
      then a gather of the rows.
    * `moe.grouped_matmul`: a GEMM whose weight is gathered by `row_expert`.
    * `moe.combine`: a gather through `slot` and a weighted sum over top-k.

    Routing and dispatch cost O(T E^2) and O((T k)^2): fine for the sizes the
    CPU path tests; the GPU path will replace them with scans.

    Before: `%y = moe.combine %o, %slot, %w : ...`
    After: `%y = linalg.generic {...} ins(%slot, %w : ...) outs(%init : ...)`
    with the row of `%o` read by `tensor.extract`. Run it with
    `--implicit-check-not=moe.` in tests: nothing of `moe` is left.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::cf::ControlFlowDialect"];
}

def ConvertMoEToCPU : Pass<"convert-moe-to-cpu"> {
  let summary = "Lower moe.route/dispatch/grouped_matmul to tiled, vectorized, threaded CPU code";
  let description = [{
    The CPU code-generation strategy for the steps that dominate a layer's
    time. Each op becomes explicit loops on buffers (a memref island between
    `bufferization.to_buffer` and `bufferization.to_tensor restrict`), so the
    strategy is visible in the IR and needs no later pattern matching:

    * `moe.grouped_matmul` with `expert_offsets`: an `scf.forall` (threads)
      over (column block, expert) work items; in each, the expert's rows are
      walked in register tiles of `register-rows` rows by `register-cols`
      weight rows, and the reduction over K runs on `vector<{vector-width}xf32>`
      accumulators with `vector.fma` (weights of one expert are reused by all
      rows of its tile; bf16 operands are widened in registers). Experts
      with fewer rows than `register-rows` (decode) read their weights once,
      a weight row at a time in memory order, each dot product on 4
      interleaved accumulators.
      Experts with at least `packed-min-rows` rows (prefill) instead take a
      second `scf.forall` over thread slots, each a run of (row block, column
      panels) items listed by a scan: per panel of 2 x `vector-width` weight
      rows, the weights are packed transposed (as f32, by shuffle stages) into
      the slot's scratch, and register tiles of 6 rows by the panel
      accumulate outer products (a broadcast activation times two vectors of
      packed weights), stored as whole vectors.
    * `moe.route`: the router GEMM as a one-expert grouped GEMM, then top-k by
      selection per token: O(T E k), ties to the lower expert id, NaN last.
    * `moe.dispatch`: a counting sort by a scan: O(T k + E).

    With `bf16-dot` (AVX512-BF16, 16 lanes), GEMMs whose rows and weights
    are both bf16 multiply pairs of bf16 with `x86vector.avx512.dot`
    (vdpbf16ps) instead of widening them: the dot products read 32 elements
    of depth a step, and the packed panels hold pairs of depths
    (`[K / 2][2 x panel]` bf16) against a 32-bit broadcast of each row's pair;
    FP8 weights there are packed as exact bf16 and each scale block's sum is
    scaled once.

    Other moe ops are left for `convert-moe-to-linalg`. FP8 rows and FP8
    weights whose scale groups are not whole vectors keep the linalg
    lowering.
  }];
  let options = [
    Option<"vectorWidth", "vector-width", "int64_t", "8",
           "f32 lanes of the target's vectors (8: AVX2, 16: AVX-512, 4: SSE/NEON)">,
    Option<"registerRows", "register-rows", "int64_t", "3",
           "Rows of the GEMM's register tile">,
    Option<"registerCols", "register-cols", "int64_t", "4",
           "Weight rows (output columns) of the GEMM's register tile">,
    Option<"columnBlock", "column-block", "int64_t", "64",
           "Output columns of one thread work item">,
    Option<"packedMinRows", "packed-min-rows", "int64_t", "24",
           "Experts with at least this many rows take the packed GEMM (0: none)">,
    Option<"bf16Dot", "bf16-dot", "bool", "false",
           "The target has AVX512-BF16 (vector-width 16): GEMMs of bf16 rows and "
           "bf16 weights (FP8 weights in the packed GEMM) multiply pairs of bf16 "
           "with x86vector.avx512.dot (vdpbf16ps) instead of widening them to f32">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::bufferization::BufferizationDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::vector::VectorDialect",
                           "::mlir::x86vector::X86VectorDialect"];
}

def MoEParallelOuterLoop : Pass<"moe-parallel-outer-loop"> {
  let summary = "Keeps only the outer dimension of each scf.parallel parallel";
  let description = [{
    `convert-linalg-to-parallel-loops` makes every parallel dimension of an
    elementwise op (the activation, the combine, fills) one `scf.parallel`;
    `convert-scf-to-openmp` then collapses them into one linear loop whose
    every iteration divides its index back into (row, column), and LLVM
    vectorizes nothing. This pass keeps the outer dimension as the
    `scf.parallel` (the rows, split among threads) and turns the others into
    an `scf.for` nest inside it, so the innermost loop walks a contiguous
    row. An `scf.parallel` inside another (the inner parallel dimensions
    of an op with a reduction between them, e.g. the combine's loops
    (token, choice, column)) becomes an `scf.for` nest. Loops with
    reductions are left alone. Each element is still computed once, by one
    thread.
  }];
  let dependentDialects = ["::mlir::scf::SCFDialect"];
}

def MoEApproximateActivationExp : Pass<"moe-approximate-activation-exp"> {
  let summary = "Replaces the activations' exp by upstream's polynomial approximation";
  let description = [{
    The `math.exp` ops that `convert-moe-to-linalg` marks `moe.approximable`
    (the sigmoid of SwiGLU and clamped SwiGLU; never routing's, whose scores
    choose experts) become MLIR's polynomial approximation
    (`populateMathPolynomialApproximationPatterns`): plain arithmetic that
    LLVM vectorizes, where a call of libm's `expf` keeps the loop scalar.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
                           "::mlir::vector::VectorDialect"];
}

def MoECheckEntryMemrefs : Pass<"moe-check-entry-memrefs", "::mlir::ModuleOp"> {
  let summary = "The C entry refuses memref descriptors its body would misread";
  let description = [{
    A bufferized layer reads each memref argument as a dense row-major
    array at offset 0 with the static sizes of its type (identity layouts),
    and the lowering never reads a descriptor's offset or static strides: a
    caller of `_mlir_ciface_<entry>` passing a strided view, an offset or
    another size got wrong results with no error. For each exported function
    with `llvm.emit_c_interface`, this pass gives every identity-layout
    memref argument a fully dynamic type (the same C descriptor), asserts
    at entry (`cf.assert`, which prints its message and aborts) that the
    descriptor has the static sizes, sizes >= 0, offset 0 and row-major
    strides (a dimension of size 1 may have any stride, as numpy and torch
    allow), then views it as the type the body was compiled for
    (`memref.reinterpret_cast`: a `memref.cast` would be folded into its
    users, which then read the open type). The message names the argument by its `moe.name` attribute
    (moe-compile --config sets it), else by its position.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::cf::ControlFlowDialect",
                           "::mlir::memref::MemRefDialect"];
}

def MoEFingerprint : Pass<"moe-fingerprint", "::mlir::ModuleOp"> {
  let summary = "Stores the layer's fingerprint on the module, for the ranks' agreement";
  let description = [{
    Sets the module attribute `moe.fingerprint` (i64, never 0) to a hash
    (xxh3) of the module as printed with fixed flags (no locations, no
    elision, whatever the command line says), the attribute itself left
    out. `convert-moe-to-runtime` gives every dispatch plan this value
    (MOERT_PLAN_LAYER), which the ranks must agree on, and removes the
    attribute. The pipelines run it
    first, before any decision that depends on the machine compiling (the
    CPU's vector width, a GPU's chip), so ranks that build one layer on
    different machines agree and layers that differ only where no
    collective sees it (another intermediate size, routing rule or
    activation) do not. The options are those of the pipeline that change
    the layer's math or exchange after this pass; they are hashed with it.
  }];
  let options = [
    Option<"dedupeTp", "dedupe-tp", "bool", "true",
           "The pipeline's moe-dedupe-tp-dispatch">,
    Option<"quantization", "quantization", "std::string", "\"none\"",
           "The pipeline's dispatch quantization">,
    Option<"fp8Gemm", "fp8-gemm", "bool", "true",
           "The pipeline's FP8 dispatch: the GEMM reads the codes">,
  ];
}

def ConvertMoEToRuntime : Pass<"convert-moe-to-runtime", "::mlir::ModuleOp"> {
  let summary = "Lower moe.ep_dispatch / moe.ep_combine to calls into libmoert";
  let description = [{
    Each cross-rank op becomes a `func.call` of an external function with a C
    interface, which the runtime implements (`runtime/include/moert/moert.h`):
    `moert_ep_dispatch_{f32,bf16}` and `moert_ep_combine_{f32,bf16}`. The
    declarations use dynamic shapes so that one symbol serves every layer;
    `tensor.cast` restores the static extents. The capacity, the other
    sizes and the layer's fingerprint become the plan, a constant i64 tensor
    in the order of moert.h's MOERT_PLAN_* fields, which the runtime checks
    before it writes anything. An existing
    symbol with an entry's name is reused when it is a `func.func`
    declaration of the same type; a defined function, another type or
    another kind of symbol is an error at the op that needs the entry.

    Before:
    ```mlir
    %rx, %ids, %w, %h = moe.ep_dispatch %x, %i, %wt, %rank capacity = 64 : ...
    ```
    After:
    ```mlir
    %plan = arith.constant dense<[64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5417...]> : tensor<12xi64>
    %r:4 = call @moert_ep_dispatch_f32(%xd, %id, %wd, %rank, %pd) : ...
    ```
  }];
  let options = [
    Option<"intoBuffers", "into-buffers", "bool", "false",
           "Dispatch and combine into buffers the compiled code allocates "
           "(`moert_ep_dispatch_into_*`, `moert_ep_combine_into_*`): the "
           "received rows must be static (`slots`, or `capacity` rows from "
           "`moe-decompose-layer{static-received}`). The calls take a stream "
           "operand (`moe.stream_operand`): null here, the entry's stream "
           "once `moe-gpu-host-abi` has added it. What a GPU's workspace "
           "needs; usable on the CPU (host buffers) to test it">,
    Option<"allGatherSlots", "all-gather-slots", "bool", "false",
           "With into-buffers: dispatches of the decode layout (slots) go by "
           "all-gather (`moert_ep_gather_into_*`): every rank gets every "
           "rank's block of S token rows with global ids, which a linalg op "
           "maps to this rank's experts; the combine returns block r to rank "
           "r (`moert_ep_return_into_*`) and a linalg op sums each token's "
           "rows in rank order. No packing and fixed sizes: what the NCCL "
           "backend can send from device buffers">,
    Option<"packInLayer", "pack-in-layer", "bool", "false",
           "With into-buffers: prefill dispatches (no slots) are packed by the "
           "layer's own ops: moe.dispatch over the ranks groups each token's "
           "row and its route (targets, weights) by destination rank, and "
           "`moert_ep_send_packed_into_*` moves the blocks; the combine gets "
           "the rows back in that order (`moert_ep_return_packed_into_*`) "
           "and moe.combine sums them. No row crosses to the host: what the "
           "NCCL backend sends from device buffers. The new moe ops need the "
           "strategy and convert-moe-to-linalg to run again after this pass">,
    Option<"fingerprint", "fingerprint", "bool", "true",
           "Give every dispatch plan the layer's fingerprint (MOERT_PLAN_LAYER: "
           "the module's `moe.fingerprint` from moe-fingerprint, else a hash of "
           "the module before this pass), which the ranks must agree on: "
           "libraries built from different configs then fail on every rank, "
           "naming it, where their collectives alone match">,
  ];
  let dependentDialects = ["::mlir::func::FuncDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::bufferization::BufferizationDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::LLVM::LLVMDialect"];
}

def ConvertMoEToGPU : Pass<"convert-moe-to-gpu"> {
  let summary = "Lowers bf16 moe GEMMs, routing and dispatch to GPU kernels";
  let description = [{
    Each bf16 `moe.grouped_matmul` whose rows come in tiles of 16 that hold
    one expert each (a `moe.dispatch` with `row_tile` a multiple of 16, or a
    one-expert GEMM such as the shared expert) becomes two `gpu.launch`es,
    one of which the host runs by the row count, with `nvvm.mma.sync`
    m16n8k16 products (bf16 in, f32 accumulators). With at most 64 rows per
    expert (decode) a block takes a tile of 16 rows by 32 columns (16 or 8
    without experts), its warps taking turns along the depth with 16-byte
    loads a lane, and sums them in workgroup memory; otherwise (prefill) a
    block takes 4 row tiles by 64 columns (several experts) or 128 rows by
    64 columns (one expert or none) and stages rows and weights through
    workgroup memory (`nvgpu.device_async_copy`, two stages,
    `nvgpu.ldmatrix`). A tile's expert is `row_expert` of its first row;
    padding rows are zero. N and K must be multiples of 32; other GEMMs
    (f32, FP8 rows, other shapes) are left to `convert-moe-to-linalg`.

    Then a bf16 `moe.route` (E a multiple of 32, at most 1024) becomes its
    logits GEMM on tensor cores plus one kernel with a block per token and a
    thread per expert (scores, groups, ranks in the order the other
    lowerings use), a `moe.dispatch` of the padded layout (at most 256
    experts) four kernels: blocks of 32 warps count each expert's choices
    (match.any a step of 32), one block scans the counts, the blocks number
    the rows (in choice order within an expert), then a block per row
    copies its token's row or zeros; `moe.activation` and `moe.combine` a
    kernel each that moves 16 bytes a thread at a time (static widths).

    `prefill-block=RxC` gives a prefill GEMM of several experts the block
    form instead of the narrow one: a small kernel numbers each expert's
    blocks of up to R rows into a table, then a block per entry computes
    them by C columns with 4 warps of R/2 x C/2 (R and C 32, 64 or 128;
    C dividing N), its rows and weights staged through shared memory in
    `prefill-stages` cp.async stages of `prefill-stage-depth`, which the wide
    form (one expert) takes as well (as many as fit in 48 KiB, of depth 32).
  }];
  let options = [
    Option<"prefillBlock", "prefill-block", "std::string", "\"64x128\"",
           "Prefill blocks of a GEMM of several experts: narrow (4 tiles of 16 "
           "rows by 64 columns, any experts) or RxC (up to R rows of one expert "
           "by C columns, from a table of blocks)">,
    Option<"prefillStages", "prefill-stages", "int64_t", "3",
           "cp.async stages of the block and wide prefill forms (2-4; the wide "
           "form takes as many as fit in 48 KiB)">,
    Option<"prefillStageDepth", "prefill-stage-depth", "int64_t", "64",
           "Depth of a block form's stage (32 or 64); beyond 48 KiB the stages "
           "live in dynamic shared memory, at most 99 KiB">,
    Option<"fuseSwiglu", "fuse-swiglu", "bool", "false",
           "With wgmma blocks: a SwiGLU moe.activation of a bf16 grouped "
           "GEMM goes into the GEMM's prefill epilogue (a block stages its "
           "gate and matching up weight rows); its decode form runs the "
           "activation kernel after. Not yet timed on a GPU">,
    Option<"fp8Rows", "fp8-rows", "bool", "false",
           "With wgmma blocks: the prefill form of FP8 block-scaled weights "
           "quantizes its rows per 128 of depth (E4M3, f32 scale amax / 448) "
           "and multiplies codes by codes (e4m3 wgmma k32), each step's "
           "products added times the row's and the weight block's scales. "
           "Not yet run on a GPU">,
    Option<"prefillMma", "prefill-mma", "std::string", "\"mma-sync\"",
           "The block form's products: mma-sync (ldmatrix and mma.sync "
           "m16n8k16, every chip) or wgmma (sm_90a: a warpgroup a 64 rows, "
           "its wgmma.mma_async m64nCk16 from swizzled stages; blocks of 64 "
           "or 128 rows by 64, 128 or 256 columns, stages 64 deep, up to 227 "
           "KiB)">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::bufferization::BufferizationDialect",
                           "::mlir::gpu::GPUDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::nvgpu::NVGPUDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::vector::VectorDialect"];
}

def MoEGPURouterMatmul : Pass<"moe-gpu-router-matmul"> {
  let summary = "Runs the router's bf16 logits GEMM on tensor cores";
  let description = [{
    The `linalg.generic` that `convert-moe-to-linalg` writes for the
    router's logits, `logits[t, e] = sum_k f32(x[t, k]) * f32(w[e, k])`
    into zeros with bf16 `x` and `w`, becomes the kernels of
    `convert-moe-to-gpu` without experts (`nvvm.mma.sync` m16n8k16 with f32
    accumulators), stored as f32: the products are exact, only the order of
    the sums differs. E and K must be multiples of 32; other GEMMs are left
    alone.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::bufferization::BufferizationDialect",
                           "::mlir::gpu::GPUDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::nvgpu::NVGPUDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::vector::VectorDialect"];
}

def MoEGPUHostABI : Pass<"moe-gpu-host-abi", "::mlir::ModuleOp"> {
  let summary = "Gives a layer's entry the GPU calling convention: device buffers, one workspace, a stream";
  let description = [{
    Runs on buffers, before the loops become kernels. Each public function
    with a body becomes a GPU entry that a caller (PyTorch, an engine) can
    enqueue on its own stream:

    - a returned memref becomes a trailing out-parameter (the caller's
      device buffer): the buffer returned is replaced by it;
    - every `memref.alloc` becomes a `memref.view` into one trailing
      `memref<?xi8>` workspace argument, at offsets aligned to 256 bytes
      that are computed on entry from the arguments' shapes; an entry
      whose workspace is smaller than it needs fails (`cf.assert`) before
      it launches anything. `memref.dealloc`s go;
    - `memref.copy` becomes `linalg.copy`, which becomes a kernel like
      every other loop nest;
    - a trailing `!llvm.ptr` argument marked `moe.gpu_stream` carries the
      caller's `CUstream`, on which `moe-gpu-launch-on-stream` enqueues
      every launch.

    A function `<entry>_workspace_bytes(tokens: index) -> index` gives the
    workspace an entry needs for `tokens` rows of its input. A buffer whose
    size depends on anything but argument shapes (a value read from memory,
    a loop's index) is an error at that buffer: the host cannot read device
    memory.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::cf::ControlFlowDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::memref::MemRefDialect"];
}

def MoEGPUBlockThreads : Pass<"moe-gpu-block-threads"> {
  let summary = "Splits each outermost scf.parallel into blocks and threads";
  let description = [{
    Tiles the innermost dimension of every outermost `scf.parallel` by
    `threads` (fewer when the dimension is statically smaller) and the
    others by 1, with constant inner bounds and a guard
    (`scf::tileParallelLoop`), so that `gpu-map-parallel-loops` maps the
    tiles to blocks and the elements of a tile to the block's threads. The
    tile's loop lists the tiled dimension first, so that it becomes thread
    x (a block has at most 64 threads in z): consecutive threads take
    consecutive elements of the innermost (contiguous) dimension, and
    their loads and stores coalesce.
  }];
  let options = [
    Option<"threads", "threads", "int64_t", "128",
           "Threads per block along the innermost parallel dimension">,
  ];
  let dependentDialects = ["::mlir::scf::SCFDialect", "::mlir::arith::ArithDialect"];
}

def MoEGPUHostCheck : Pass<"moe-gpu-host-check", "::mlir::ModuleOp"> {
  let summary = "Fails where host code would touch a device buffer";
  let description = [{
    After `convert-parallel-loops-to-gpu`, every load and store of a
    buffer must be inside a `gpu.launch`: the entry's buffers are device
    memory. A `memref.load`, `memref.store`, `memref.copy` or vector
    transfer left on the host is an error at that op.
  }];
}

def MoEGPUKernelRegisters : Pass<"moe-gpu-kernel-registers", "::mlir::ModuleOp"> {
  let summary = "Register budgets for kernels ptxas would otherwise spill";
  let description = [{
    Runs after `gpu-kernel-outlining`. Given only `.maxntid 1024`, ptxas
    keeps two blocks resident on a multiprocessor: 32 registers a thread,
    and it spills where a kernel needs more (the dispatch's bookkeeping
    with a placement's slot counts). Every kernel whose `known_block_size`
    has more than 512 threads gets `nvvm.minctasm = 1` (`.minnctapersm 1`):
    one resident block, up to 64 registers. Such kernels run few blocks
    (one per 2048 choices), so the second resident block buys nothing.
    Given `.maxntid 256`, ptxas likewise aims at 32 registers (eight
    resident blocks) and spilled the combine's eight rows; every other
    kernel without tensor-core products gets
    `nvvm.minctasm = 64K / (64 x threads)`: up to 64 registers a thread.
    Given `.maxntid 128`, ptxas aimed Qwen3-30B-A3B's decode down GEMM at
    64 registers and spilled, and capped at 80 or 96 it spilled
    DeepSeek-V3's; kernels with `nvvm.mma.sync` products get
    `64K / (128 x threads)`: up to 128 registers, a decode GEMM's step of
    loads in flight (the prefill forms took 128 already). Kernels with
    `nvvm.wgmma.mma_async` (up to 190) keep the budget ptxas chooses.
  }];
  let dependentDialects = ["::mlir::NVVM::NVVMDialect"];
}

def MoEGPUModuleToBinary : Pass<"moe-gpu-module-to-binary", "::mlir::ModuleOp"> {
  let summary = "gpu-module-to-binary with the kernels serialized in parallel";
  let description = [{
    What upstream `gpu-module-to-binary` does (each `gpu.module` becomes a
    `gpu.binary` of one object per target), but the modules are serialized
    (LLVM's NVPTX back end, then ptxas and fatbinary) on the context's
    threads: a layer has 17-52 kernels, each its own module, and upstream
    serializes them one after another (most of moe-compile's time for a
    CUDA layer). The IR is changed on the calling thread afterwards, in the
    modules' order, so the output does not depend on the threads.
  }];
  let options = [
    Option<"format", "format", "std::string", "\"fatbin\"",
           "What each object holds: llvm, isa (PTX), bin (cubin) or fatbin">,
  ];
}

def MoEGPULaunchOnStream : Pass<"moe-gpu-launch-on-stream", "::mlir::ModuleOp"> {
  let summary = "Enqueues every kernel launch on the entry's stream argument";
  let description = [{
    Runs after `gpu-to-llvm`. Each `gpu.launch_func` inside an `llvm.func`
    with an argument marked `moe.gpu_stream` gets that argument as its
    async object: the translation to LLVM IR then emits one
    `mgpuLaunchKernel` on the caller's stream, with no stream creation, no
    synchronisation and no destruction around it. A launch in a function
    without a stream argument is an error. Kernels named `moe_side_stream`
    go on the side stream that `moe-gpu-side-stream` obtained instead.
  }];
}

def MoEGPUSideStream : Pass<"moe-gpu-side-stream", "::mlir::ModuleOp"> {
  let summary = "Runs the shared expert's kernels on a second stream beside the others";
  let description = [{
    Runs after `gpu-kernel-outlining`, on entries with a `moe.gpu_stream`
    argument, or before it on `gpu.launch` ops named `moe_side_stream` by
    their function attribute (`moe-compile --emit=launches`, whose IR the
    CPU emulator runs with the two streams' order). Kernels named `moe_side_stream` (those of ops marked
    `moe.side_stream`: the shared expert that `moe-decompose-layer
    {shared-first}` builds first) go on a second stream, created once per
    stream by the runtime (`moertGpuSideStream`), and the host code orders
    the two streams with events instead of a host wait:

    - a fork (`moertGpuForkSide`: the side stream waits for what the
      stream holds so far) before a side kernel that follows no fork, or
      that reads a buffer a kernel on the stream used since the last fork;
    - a join (`moertGpuJoinSide`: the stream waits for the side stream)
      before a kernel or runtime call on the stream that uses a buffer a
      side kernel used, before an op holding kernels of both streams (whose
      regions are then ordered the same way, each on its own), and before
      the block's end, so the entry's work is complete on its stream.

    Buffers are compared by their root: the workspace view or argument
    they are views of. Arguments the entry does not write (its inputs: not
    `moe.gpu_written`) need no order. `moe-gpu-launch-on-stream` then puts
    the side kernels on the side stream.
  }];
}

#endif // MOE_CONVERSION_PASSES_TD
