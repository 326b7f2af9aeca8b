//===- Pipelines.cpp - named moe compilation pipelines --------------------===//
#include "moe/Pipelines/Pipelines.h"

#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>

using namespace mlir;
using namespace mlir::moe;

namespace {
/// Shared front half: moe -> linalg on tensors -> buffers.
/// moe ops -> linalg on tensors + runtime calls, with the optional planning
/// passes in their place: TP dedupe before decomposition, quantization after.
/// Workspaces are planned last, once quantization has fixed the row bytes.
/// `intoBuffers`: the expert-parallel exchange fills static buffers that the
/// layer allocates (a GPU's workspace) instead of returning the runtime's;
/// `packInLayer`: the prefill exchange's rows are packed by the layer's own
/// ops, which the strategy then lowers.
std::string toLinalg(bool dedupeTp, StringRef quantization, bool fp8Gemm = true,
                     StringRef cpuStrategy = "", int64_t rowTile = 1, bool activateAllRows = false,
                     bool intoBuffers = false, bool allGather = false, bool packInLayer = false,
                     bool sharedFirst = false) {
  std::string text = dedupeTp ? "moe-dedupe-tp-dispatch," : "";
  text += "moe-decompose-layer{row-tile=" + std::to_string(rowTile) +
          (activateAllRows ? " activate-all-rows=true" : "") +
          (intoBuffers ? " static-received=true" : "") + (sharedFirst ? " shared-first=true" : "") +
          "},";
  if (quantization != "none")
    text += "moe-fuse-quant-dispatch{scheme=" + quantization.str() +
            " gemm-consumes-fp8=" + (fp8Gemm ? "true" : "false") + "},";
  text += "moe-plan-buffers," + cpuStrategy.str() +
          "convert-moe-to-linalg,moe-verify-collectives,convert-moe-to-runtime";
  if (!intoBuffers)
    return text + ",";
  text += std::string("{into-buffers=true") + (allGather ? " all-gather-slots=true" : "") +
          (packInLayer ? " pack-in-layer=true" : "") + "},";
  // The packing's moe.dispatch and moe.combine.
  if (packInLayer)
    text += cpuStrategy.str() + "convert-moe-to-linalg,";
  return text;
}
/// moe-fingerprint with the options that decide the layer after it.
std::string fingerprint(bool dedupeTp, StringRef quantization, bool fp8Gemm) {
  return llvm::formatv("moe-fingerprint{{dedupe-tp={0} quantization={1} fp8-gemm={2}},",
                       dedupeTp ? "true" : "false", quantization, fp8Gemm ? "true" : "false");
}

constexpr const char *kToBuffers =
    "canonicalize,cse,"
    // An op whose result is inserted into an empty tensor (e.g. the
    // activation of the used rows) writes into it in place, not into a copy.
    "eliminate-empty-tensors,"
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map},"
    "canonicalize";

LogicalResult addPipeline(OpPassManager &pm, StringRef text) {
  std::string errors;
  llvm::raw_string_ostream os(errors);
  if (succeeded(parsePassPipeline(text, pm, os)))
    return success();
  llvm::errs() << "moe: internal pipeline did not parse: " << errors << "\n";
  return failure();
}
} // namespace

LogicalResult moe::buildCpuPipeline(OpPassManager &pm,
                                    const CpuPipelineOptions &options) {
  // The GEMMs, routing and dispatch get the tiled, vectorized, threaded
  // strategy; the rest (activation, combine) become loops parallel over
  // rows (moe-parallel-outer-loop) whose inner loops LLVM's O3 vectorizes. Thread loops
  // (scf.forall, scf.parallel) become OpenMP worksharing loops; each output
  // element is still computed by one thread, whatever the thread count.
  std::string strategy = llvm::formatv(
      "convert-moe-to-cpu{{vector-width={0} register-rows={1} register-cols={2} "
      "column-block={3} packed-min-rows={4} bf16-dot={5}},",
      options.vectorWidth.getValue(), options.registerRows.getValue(),
      options.registerCols.getValue(), options.columnBlock.getValue(),
      options.packedMinRows.getValue(), options.bf16Dot.getValue());
  // The fingerprint first: before any choice that depends on this machine.
  std::string text = fingerprint(options.dedupeTp, options.dispatchQuantization, options.fp8Gemm) +
                     toLinalg(options.dedupeTp, options.dispatchQuantization, options.fp8Gemm,
                              strategy, options.rowTile,
                              /*activateAllRows=*/false, options.epIntoBuffers, options.epAllGather,
                              options.epPackInLayer) +
                     kToBuffers +
                     // The C entry refuses descriptors the body would misread.
                     ",moe-check-entry-memrefs,buffer-deallocation-pipeline,"
                     "func.func(convert-linalg-to-parallel-loops),"
                     "moe-parallel-outer-loop,moe-approximate-activation-exp,"
                     "scf-forall-to-parallel,convert-scf-to-openmp,"
                     // Inlines the worksharing loops' alloca scopes (they hold no
                     // allocas), which the CFG lowering cannot split.
                     "canonicalize";
  if (options.lowerToLLVM)
    text += ",arith-emulate-unsupported-floats{source-types=bf16 target-type=f32},"
            "arith-expand{include-bf16},convert-vector-to-scf,convert-scf-to-cf,"
            "expand-strided-metadata,lower-affine,"
            "convert-vector-to-llvm{enable-x86vector},"
            "finalize-memref-to-llvm{use-generic-functions},convert-math-to-llvm,"
            "convert-arith-to-llvm,convert-cf-to-llvm,convert-openmp-to-llvm,"
            "convert-func-to-llvm,convert-index-to-llvm,convert-ub-to-llvm,"
            "reconcile-unrealized-casts";
  return addPipeline(pm, text);
}

/// Upstream's gpu-lower-to-nvvm-pipeline (its passes for these options),
/// but for its last step, gpu-module-to-binary: moe-gpu-module-to-binary
/// serializes the kernels in parallel.
static std::string lowerToNVVM(const CudaPipelineOptions &options) {
  return llvm::formatv(
      "convert-nvgpu-to-nvvm,gpu-kernel-outlining,convert-vector-to-scf,convert-scf-to-cf,"
      "convert-nvvm-to-llvm,convert-func-to-llvm,expand-strided-metadata,"
      "nvvm-attach-target{{chip={0} features={1} O={3}},lower-affine,convert-arith-to-llvm,"
      "convert-index-to-llvm{{index-bitwidth=64},canonicalize,cse,"
      "gpu.module(convert-gpu-to-nvvm{{index-bitwidth=64},canonicalize,cse,"
      "reconcile-unrealized-casts),"
      "gpu-to-llvm,moe-gpu-module-to-binary{{format={2}},convert-math-to-llvm,canonicalize,cse,"
      "reconcile-unrealized-casts",
      options.chip.getValue(), options.features.getValue(), options.format.getValue(),
      options.optLevel.getValue());
}

/// What the CUDA pipeline's options allow, or "": the chips whose
/// instructions the kernels use (bf16 mma.sync from sm_80), a kernel
/// optimization level, and a CUDA path that exists.
static std::string cudaOptionProblem(const CudaPipelineOptions &options) {
  static constexpr llvm::StringLiteral chips[] = {"sm_90a", "sm_90", "sm_89", "sm_80"};
  if (!llvm::is_contained(chips, options.chip.getValue()))
    return "chip=" + options.chip.getValue() +
           ": the kernels need sm_90a, sm_90, sm_89 or sm_80 (bf16 tensor-core products)";
  if (options.optLevel < 0 || options.optLevel > 3)
    return "opt-level=" + std::to_string(options.optLevel) + ": 0 to 3";
  if (!options.cudaPath.empty() && !llvm::sys::fs::is_directory(options.cudaPath))
    return "cuda-path=" + options.cudaPath.getValue() + ": no such directory";
  return "";
}

LogicalResult moe::buildCudaPipeline(OpPassManager &pm,
                                     const CudaPipelineOptions &options) {
  if (std::string problem = cudaOptionProblem(options); !problem.empty()) {
    llvm::errs() << "moe-cuda-pipeline: " << problem << "\n";
    return failure();
  }
  // Upstream's NVVM serialization finds libdevice (for expf and friends)
  // only through these variables; without it the PTX keeps unresolved calls.
  if (!options.cudaPath.empty())
    setenv("CUDA_HOME", options.cudaPath.c_str(), /*overwrite=*/1);
  else if (!getenv("CUDA_HOME") && !getenv("CUDA_ROOT") && !getenv("CUDA_PATH"))
    setenv("CUDA_HOME", "/usr/local/cuda", /*overwrite=*/0);
  std::string toGpu = llvm::formatv(
      "convert-moe-to-gpu{{prefill-block={0} prefill-stages={1} prefill-stage-depth={2} "
      "prefill-mma={3} fuse-swiglu={4} fp8-rows={5}},",
      options.prefillBlock.getValue(), options.prefillStages.getValue(),
      options.prefillStageDepth.getValue(), options.prefillMma.getValue(),
      options.fuseSwiglu.getValue() ? "true" : "false",
      options.fp8Rows.getValue() ? "true" : "false");
  if (options.stopAfterHostABI) {
    // Bufferized entries with the GPU calling convention, before any kernel.
    std::string text =
        fingerprint(options.dedupeTp, options.dispatchQuantization, options.fp8Gemm) +
        "inline,moe-drop-phase-variants," +
        toLinalg(options.dedupeTp, options.dispatchQuantization, options.fp8Gemm, toGpu,
                 /*rowTile=*/16,
                 /*activateAllRows=*/true, /*intoBuffers=*/true, options.epAllGather,
                 options.epPackInLayer, options.sharedStream) +
        "moe-gpu-router-matmul," + kToBuffers + ",moe-gpu-host-abi,moe-check-entry-memrefs";
    return addPipeline(pm, text);
  }
  // The host code only sizes buffers and launches: every buffer is a view of
  // the caller's device workspace (moe-gpu-host-abi), every loop nest a
  // kernel whose innermost dimension spreads over a block's threads.
  std::string text = llvm::formatv(
      "{2}{4}{0},{3}func.func(convert-linalg-to-parallel-loops,"
      "moe-gpu-block-threads{{threads={1}},gpu-map-parallel-loops),"
      "convert-parallel-loops-to-gpu,canonicalize{5}",
      kToBuffers, options.blockThreads.getValue(),
      // Phase variants (moe-specialize-phase) are inlined into their entry,
      // whose one workspace serves both. Rows are padded to the tensor-core
      // GEMM's tiles of 16; the activation runs over them all, so that the
      // host reads no row count.
      options.hostABI
          ? fingerprint(options.dedupeTp, options.dispatchQuantization, options.fp8Gemm) +
                "inline,moe-drop-phase-variants," +
                toLinalg(options.dedupeTp, options.dispatchQuantization, options.fp8Gemm, toGpu,
                         /*rowTile=*/16,
                         /*activateAllRows=*/true, /*intoBuffers=*/true, options.epAllGather,
                         options.epPackInLayer, options.sharedStream)
          : toLinalg(/*dedupeTp=*/true, "none"),
      // The entry refuses descriptors its kernels would misread (strided,
      // offset, another shape) before it launches anything.
      options.hostABI ? "moe-gpu-host-abi,moe-check-entry-memrefs," : "",
      options.hostABI ? "moe-gpu-router-matmul," : "",
      options.hostABI ? ",moe-gpu-host-check" : "");
  if (!options.stopBeforeOutlining)
    text += llvm::formatv(",gpu-launch-sink-index-computations,gpu-kernel-outlining,moe-gpu-kernel-"
                          "registers,{0}{1}{2}",
                          options.hostABI ? "moe-gpu-side-stream," : "", lowerToNVVM(options),
                          options.hostABI ? ",moe-gpu-launch-on-stream" : "");
  else if (options.hostABI) // the streams' order, on the launches as they are
    text += ",moe-gpu-side-stream";
  return addPipeline(pm, text);
}

namespace {
/// Registers a pipeline whose construction can fail (bad option values), so
/// that the tool exits with an error instead of running a partial pipeline.
template <typename Options>
void registerFallible(StringRef arg, StringRef description,
                      LogicalResult (*build)(OpPassManager &, const Options &)) {
  registerPassPipeline(
      arg, description,
      [build](OpPassManager &pm, StringRef text,
              function_ref<LogicalResult(const Twine &)> errorHandler) {
        Options options;
        if (failed(options.parseFromString(text)))
          return failure();
        if (failed(build(pm, options)))
          return errorHandler("cannot build the pipeline from these options");
        return success();
      },
      [](function_ref<void(const detail::PassOptions &)> handler) { handler(Options()); });
}
} // namespace

void moe::registerMoEPipelines() {
  registerFallible<CpuPipelineOptions>(
      "moe-cpu-pipeline", "Lower moe layers to the LLVM dialect for the CPU (one rank)",
      buildCpuPipeline);
  registerFallible<CudaPipelineOptions>(
      "moe-cuda-pipeline", "Lower moe layers to GPU kernels (NVVM, PTX for sm_90) plus host code",
      buildCudaPipeline);
}
