//===- Pipelines.h - named moe compilation pipelines ------------*- C++ -*-===//
#ifndef MOE_PIPELINES_PIPELINES_H
#define MOE_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::moe {

/// Options of `moe-cpu-pipeline`.
struct CpuPipelineOptions : PassPipelineOptions<CpuPipelineOptions> {
  Option<std::string> dispatchQuantization{
      *this, "dispatch-quantization",
      llvm::cl::desc("FP8 in expert-parallel dispatches: none, fp8-e4m3-g128 "
                     "or fp8-e4m3-g32-ue8m0 (moe-fuse-quant-dispatch)"),
      llvm::cl::init("none")};
  Option<bool> fp8Gemm{
      *this, "fp8-gemm",
      llvm::cl::desc("With dispatch-quantization, let the expert GEMM read the "
                     "FP8 codes (false: the receiver dequantizes)"),
      llvm::cl::init(true)};
  Option<bool> dedupeTp{
      *this, "dedupe-tp",
      llvm::cl::desc("With tp > 1, dispatch each token from one TP rank only "
                     "(moe-dedupe-tp-dispatch)"),
      llvm::cl::init(true)};
  Option<int64_t> vectorWidth{
      *this, "vector-width",
      llvm::cl::desc("f32 lanes of the target's vectors (moe-compile sets it "
                     "from --cpu: 8 for AVX2, 16 for AVX-512)"),
      llvm::cl::init(8)};
  Option<int64_t> registerRows{*this, "register-rows",
                               llvm::cl::desc("Rows of the GEMM register tile"),
                               llvm::cl::init(3)};
  Option<int64_t> registerCols{
      *this, "register-cols",
      llvm::cl::desc("Weight rows (output columns) of the GEMM register tile"),
      llvm::cl::init(4)};
  Option<int64_t> columnBlock{
      *this, "column-block",
      llvm::cl::desc("Output columns of one GEMM thread work item (a multiple "
                     "of register-cols)"),
      llvm::cl::init(64)};
  Option<int64_t> packedMinRows{
      *this, "packed-min-rows",
      llvm::cl::desc("Experts with at least this many rows take the packed "
                     "GEMM (0: never)"),
      llvm::cl::init(24)};
  Option<bool> bf16Dot{
      *this, "bf16-dot",
      llvm::cl::desc("bf16 GEMMs multiply bf16 pairs with vdpbf16ps (moe-compile "
                     "sets it when --cpu has AVX512-BF16 and 16 lanes)"),
      llvm::cl::init(false)};
  Option<int64_t> rowTile{
      *this, "row-tile",
      llvm::cl::desc("Pad each expert's dispatched rows to a multiple of this "
                     "(moe-decompose-layer)"),
      llvm::cl::init(1)};
  Option<bool> epIntoBuffers{
      *this, "ep-into-buffers",
      llvm::cl::desc("Expert-parallel exchange into static buffers the layer "
                     "allocates, as on a GPU (moe-decompose-layer{static-received}, "
                     "convert-moe-to-runtime{into-buffers}); tests the GPU's form "
                     "on host memory"),
      llvm::cl::init(false)};
  Option<bool> epAllGather{
      *this, "ep-all-gather",
      llvm::cl::desc("With ep-into-buffers: decode-layout dispatches go by all-gather "
                     "(convert-moe-to-runtime{all-gather-slots})"),
      llvm::cl::init(false)};
  Option<bool> epPackInLayer{
      *this, "ep-pack-in-layer",
      llvm::cl::desc("With ep-into-buffers: the layer packs the prefill dispatch's rows "
                     "itself (convert-moe-to-runtime{pack-in-layer})"),
      llvm::cl::init(false)};
  Option<bool> lowerToLLVM{*this, "lower-to-llvm",
                           llvm::cl::desc("Go down to the LLVM dialect (off: "
                                          "stop after bufferized loops)"),
                           llvm::cl::init(true)};
};

/// Options of `moe-cuda-pipeline`.
struct CudaPipelineOptions : PassPipelineOptions<CudaPipelineOptions> {
  Option<std::string> dispatchQuantization{
      *this, "dispatch-quantization",
      llvm::cl::desc("FP8 in expert-parallel dispatches: none, fp8-e4m3-g128 "
                     "or fp8-e4m3-g32-ue8m0; the receiver dequantizes unless fp8-gemm"),
      llvm::cl::init("none")};
  Option<bool> fp8Gemm{*this, "fp8-gemm",
                       llvm::cl::desc("With dispatch-quantization, the gate/up GEMM reads the FP8 "
                                      "codes and scales as they arrived (FP8 weights; its prefill "
                                      "form needs fp8-rows, wgmma and fp8-e4m3-g128)"),
                       llvm::cl::init(false)};
  Option<bool> dedupeTp{
      *this, "dedupe-tp",
      llvm::cl::desc("Each rank of a tensor-parallel group dispatches a slice "
                     "of the tokens (moe-dedupe-tp-dispatch); the workspace "
                     "holds the largest slice"),
      llvm::cl::init(true)};
  Option<bool> epAllGather{
      *this, "ep-all-gather",
      llvm::cl::desc("Decode-layout dispatches go by all-gather "
                     "(convert-moe-to-runtime{all-gather-slots}): what the NCCL "
                     "backend can send from device buffers"),
      llvm::cl::init(false)};
  Option<bool> epPackInLayer{
      *this, "ep-pack-in-layer",
      llvm::cl::desc("Prefill dispatches are packed by the layer's kernels "
                     "(convert-moe-to-runtime{pack-in-layer}): no row crosses to the "
                     "host, what the NCCL backend sends from device buffers"),
      llvm::cl::init(false)};
  Option<std::string> prefillBlock{
      *this, "prefill-block",
      llvm::cl::desc("convert-moe-to-gpu's prefill-block: narrow or RxC"),
      llvm::cl::init("64x128")};
  Option<int64_t> prefillStages{
      *this, "prefill-stages",
      llvm::cl::desc("convert-moe-to-gpu's prefill-stages (2-4)"),
      llvm::cl::init(3)};
  Option<int64_t> prefillStageDepth{
      *this, "prefill-stage-depth",
      llvm::cl::desc("convert-moe-to-gpu's prefill-stage-depth (32 or 64)"),
      llvm::cl::init(64)};
  Option<std::string> prefillMma{
      *this, "prefill-mma",
      llvm::cl::desc("convert-moe-to-gpu's prefill-mma: mma-sync or wgmma (sm_90a)"),
      llvm::cl::init("mma-sync")};
  Option<bool> fuseSwiglu{
      *this, "fuse-swiglu",
      llvm::cl::desc("convert-moe-to-gpu's fuse-swiglu: the SwiGLU in the wgmma "
                     "prefill GEMM's epilogue"),
      llvm::cl::init(false)};
  Option<bool> fp8Rows{
      *this, "fp8-rows",
      llvm::cl::desc("convert-moe-to-gpu's fp8-rows: FP8 weights' wgmma prefill "
                     "GEMMs quantize their rows and multiply e4m3 by e4m3"),
      llvm::cl::init(false)};
  Option<bool> sharedStream{
      *this, "shared-stream",
      llvm::cl::desc("The shared expert's kernels on a second stream beside the "
                     "routing, dispatch and routed experts (moe-decompose-layer"
                     "{shared-first}, moe-gpu-side-stream)"),
      llvm::cl::init(false)};
  Option<std::string> chip{*this, "chip", llvm::cl::desc("GPU architecture"),
                           llvm::cl::init("sm_90")};
  Option<std::string> features{*this, "features",
                               llvm::cl::desc("PTX features"),
                               llvm::cl::init("+ptx80")};
  Option<std::string> format{*this, "format",
                             llvm::cl::desc("Kernel format: isa (PTX), bin "
                                            "(cubin, needs ptxas), fatbin"),
                             llvm::cl::init("isa")};
  Option<std::string> cudaPath{
      *this, "cuda-path",
      llvm::cl::desc("CUDA toolkit (libdevice, ptxas); default: $CUDA_HOME, "
                     "$CUDA_ROOT or $CUDA_PATH, else /usr/local/cuda"),
      llvm::cl::init("")};
  Option<int> optLevel{*this, "opt-level",
                       llvm::cl::desc("Optimization level for the kernels"),
                       llvm::cl::init(3)};
  Option<int64_t> blockThreads{
      *this, "block-threads",
      llvm::cl::desc("Threads per block along a kernel's innermost dimension"),
      llvm::cl::init(128)};
  Option<bool> stopAfterHostABI{
      *this, "stop-after-host-abi",
      llvm::cl::desc("Stop once the entries have the GPU calling convention "
                     "(buffers, before kernels exist): moe-compile folds "
                     "<entry>_workspace_bytes there for its plan report"),
      llvm::cl::init(false)};
  Option<bool> stopBeforeOutlining{
      *this, "stop-before-outlining",
      llvm::cl::desc("Stop with every kernel a gpu.launch region in its host "
                     "function, before outlining (the IR "
                     "test/Integration/GPU/kernel_emulator.py runs)"),
      llvm::cl::init(false)};
  Option<bool> hostABI{
      *this, "host-abi",
      llvm::cl::desc("Give entries the GPU calling convention (device buffers, "
                     "one workspace, the caller's stream; off: the bare "
                     "upstream lowering, host buffers)"),
      llvm::cl::init(true)};
};

/// moe ops -> linalg on tensors -> bufferized loops -> LLVM dialect.
LogicalResult buildCpuPipeline(OpPassManager &pm,
                               const CpuPipelineOptions &options);

/// moe ops -> linalg -> parallel loops mapped to blocks x threads of GPU
/// kernels -> NVVM -> PTX/cubin, with host code in the LLVM dialect that
/// enqueues them on the caller's stream (moe-gpu-host-abi).
LogicalResult buildCudaPipeline(OpPassManager &pm,
                                const CudaPipelineOptions &options);

/// Registers `moe-cpu-pipeline` and `moe-cuda-pipeline`.
void registerMoEPipelines();

} // namespace mlir::moe

#endif // MOE_PIPELINES_PIPELINES_H
