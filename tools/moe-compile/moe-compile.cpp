//===- moe-compile.cpp - ahead-of-time compiler for MoE layers ------------===//
//
// Input: a HuggingFace config.json (--config) or a .mlir file in the moe
// dialect. Output: the moe IR, the lowered IR, LLVM IR, an object file or a
// shared library whose C entry point computes the layer, plus a JSON plan.
// Outputs are written only when compilation succeeds.
//
//===----------------------------------------------------------------------===//
#include "ModelOutput.h"
#include "ObjectEmitter.h"
#include "PlanReport.h"
#include "moe/Conversion/Passes.h"
#include "moe/Dialect/MoE/Analysis/DispatchPlan.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/Transforms/Passes.h"
#include "moe/Import/HFConfig.h"
#include "moe/InitAll.h"
#include "moe/Pipelines/Pipelines.h"
#include "moe/Support/Limits.h"
#include "moe/Support/OutputFile.h"
#include "llvm/Target/TargetMachine.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

#include <algorithm>
#include <deque>
#include <thread>

using namespace mlir;
namespace cl = llvm::cl;

namespace {
enum class Emit { Mlir, Launches, Lowered, LLVMIR, Object, Shared };
enum class Target { Cpu, Cuda };

cl::OptionCategory category("moe-compile options");
cl::opt<std::string> inputFile(cl::Positional, cl::desc("[input.mlir]"),
                               cl::init(""), cl::cat(category));
cl::opt<std::string> configFile("config",
                                cl::desc("HuggingFace config.json of a MoE model"),
                                cl::value_desc("path"), cl::cat(category));
cl::opt<std::string> modelDir(
    "model",
    cl::desc("HuggingFace checkpoint directory (config.json, *.safetensors): "
             "-o names a directory that receives the layer library, the MoE "
             "layers' weights in its layout and manifest.json"),
    cl::value_desc("dir"), cl::cat(category));
cl::opt<std::string> outputFile("o", cl::desc("Output file (with --model: directory)"),
                                cl::value_desc("path"), cl::init("-"),
                                cl::cat(category));
cl::opt<std::string> planFile("plan", cl::desc("Write the JSON plan report here"),
                              cl::value_desc("path"), cl::cat(category));
cl::opt<std::string> dtype("dtype", cl::desc("Element type of activations and "
                                             "weights: f32 or bf16"),
                           cl::init("f32"), cl::cat(category));
cl::opt<std::string> routerDtype(
    "router-dtype",
    cl::desc("Precision of the router's logits: f32, or bf16 (rounded to bf16 "
             "before scoring, as transformers computes them in a bf16 model: "
             "the same experts are chosen)"),
    cl::init("f32"), cl::cat(category));
cl::opt<int64_t> ep("ep", cl::desc("Expert-parallel ranks (> 1 links the "
                                   "layer against the runtime, libmoert)"),
                   cl::init(1), cl::cat(category));
cl::opt<int64_t> tp("tp", cl::desc("Tensor-parallel group size: groups of tp "
                                   "consecutive EP ranks hold the same tokens"),
                   cl::init(1), cl::cat(category));
cl::opt<bool> noTpDedupe("no-tp-dedupe",
                         cl::desc("With --tp > 1, let every TP rank dispatch "
                                  "all its tokens (no moe-dedupe-tp-dispatch)"),
                         cl::init(false), cl::cat(category));
cl::opt<int64_t> maxTokensPerRank(
    "max-tokens-per-rank",
    cl::desc("Most tokens any rank holds (sizes the dispatch capacity)"),
    cl::init(4096), cl::cat(category));
cl::opt<std::string> runtimeDir(
    "runtime-dir", cl::desc("Directory of libmoert.so (default: ../lib next "
                            "to this tool)"),
    cl::init(""), cl::cat(category));
cl::opt<int64_t> chunkBudget(
    "chunk-budget-bytes",
    cl::desc("Activation-memory budget of the layer's MoE buffers; chunks the "
             "layer (moe-plan-chunks) when its tokens do not fit. 0: no limit"),
    cl::init(0), cl::cat(category));
cl::opt<std::string> dispatchQuant(
    "dispatch-quant",
    cl::desc("Activations on the wire of expert-parallel dispatches: none, "
             "fp8-e4m3-g128 or fp8-e4m3-g32-ue8m0"),
    cl::init("none"), cl::cat(category));
cl::opt<bool> fp8Gemm("fp8-gemm",
                      cl::desc("With --dispatch-quant, the expert GEMM reads the FP8 codes and "
                               "scales as they arrived (=false: the receiver dequantizes; "
                               "--target cuda reads them by default with --gpu-fp8-rows, and "
                               "with --fp8-gemm=true given for other weights: the decode form "
                               "as it loads them, the prefill form after a kernel dequantizes "
                               "them; not yet run on a GPU)"),
                      cl::init(true), cl::cat(category));
cl::opt<int64_t> decodeMaxTokens(
    "decode-max-tokens",
    cl::desc("Compile a prefill and a decode variant (moe-specialize-phase); "
             "the entry takes a trailing i32 phase (0: decode when every "
             "rank holds at most this many tokens, 1: prefill, 2: decode). "
             "0: one variant"),
    cl::init(0), cl::cat(category));
cl::opt<int64_t> physicalExperts(
    "physical-experts",
    cl::desc("Physical expert slots of a load-balancer placement (moe-eplb "
             "--slots): the entry takes phys_to_log[P] and replica_share[P] "
             "instead of expert_rank, and each rank holds P/ep slots. 0: none"),
    cl::init(0), cl::cat(category));
cl::opt<std::string> replicaSelection(
    "replica-selection",
    cl::desc("With --physical-experts, how a choice picks one of its expert's "
             "replicas: static (by replica_share, per rank) or per-batch (the "
             "ranks share each batch's expert counts and split every "
             "replicated expert's choices so that the busiest rank is least "
             "busy; replica_share is then not read)"),
    cl::init("static"), cl::cat(category));
cl::opt<std::string> fp8Weights(
    "fp8-weights",
    cl::desc("Expert weights of an FP8 block-scaled checkpoint (its "
             "quantization_config): keep (the layer reads the E4M3 codes and "
             "their block scales: half the bytes of bf16) or dequantize (to "
             "--dtype when read). Default: keep where the scale blocks' rows "
             "divide the intermediate size (and, with --target cuda, both "
             "block sides are multiples of 32, as its FP8 kernels need), else "
             "dequantize"),
    cl::init("keep"), cl::cat(category));
cl::opt<std::string> entry("entry", cl::desc("Name of the layer function"),
                           cl::init("moe_layer"), cl::cat(category));
cl::opt<Emit>
    emit("emit", cl::desc("What to produce"), cl::init(Emit::Shared),
         cl::values(clEnumValN(Emit::Mlir, "mlir", "moe dialect IR"),
                    clEnumValN(Emit::Launches, "launches",
                               "with --target cuda: the layer with its kernels as gpu.launch "
                               "regions, before outlining (what test/Integration/GPU/"
                               "kernel_emulator.py runs on the CPU)"),
                    clEnumValN(Emit::Lowered, "lowered", "IR after the pipeline"),
                    clEnumValN(Emit::LLVMIR, "llvmir", "LLVM IR of the host code"),
                    clEnumValN(Emit::Object, "obj",
                               "object file (with --target cuda: "
                               "host code with the kernels embedded)"),
                    clEnumValN(Emit::Shared, "shared", "shared library")),
         cl::cat(category));
cl::opt<std::string> cpu(
    "cpu",
    cl::desc("CPU to generate code for: host (default: this machine's CPU and "
             "vector ISA), or an LLVM CPU name, e.g. x86-64-v3 (AVX2 + FMA, a "
             "portable baseline) or skylake-avx512"),
    cl::init("host"), cl::cat(category));
cl::opt<int64_t> rowTile(
    "row-tile",
    cl::desc("Pad each expert's dispatched rows to a multiple of this (the "
             "expert GEMM's row tile; 1: no padding, what the CPU GEMM wants)"),
    cl::init(1), cl::cat(category));
cl::opt<bool> epIntoBuffers(
    "ep-into-buffers",
    cl::desc("With --target cpu and --ep > 1: exchange into buffers the layer "
             "allocates, with static row counts (the form --target cuda always "
             "uses: its buffers are views of one workspace), instead of the "
             "runtime's; for testing that form on host memory"),
    cl::init(false), cl::cat(category));
cl::opt<bool> epAllGather(
    "ep-all-gather",
    cl::desc("With --ep > 1 and --decode-max-tokens: the decode variant's "
             "dispatch goes by all-gather (every rank gets every rank's block "
             "of slots rows; no packing, fixed sizes) and its combine returns "
             "each block to its rank, whose tokens sum their rows in rank "
             "order. What the NCCL backend sends from device buffers; on "
             "--target cpu it needs --ep-into-buffers"),
    cl::init(false), cl::cat(category));
cl::opt<bool>
    epPackInLayer("ep-pack-in-layer",
                  cl::desc("With --ep > 1: the prefill dispatch's rows are packed by the "
                           "layer's own kernels (grouped by destination rank on the device) "
                           "and the runtime moves the blocks, so that no row crosses to the "
                           "host: what the NCCL backend sends from device buffers. With "
                           "--dispatch-quant the layer quantizes its rows and dequantizes "
                           "what it received; with --replica-selection=per-batch the "
                           "runtime splits the batch first. On --target cpu it needs "
                           "--ep-into-buffers"),
                  cl::init(false), cl::cat(category));
cl::opt<int64_t> packedMinRows(
    "packed-min-rows",
    cl::desc("Experts with at least this many rows in a call take the packed "
             "(prefill) GEMM; fewer take the register tiles (0: never packed; "
             "default 24; with vdpbf16ps 12 for --dtype bf16, 4 for FP8 weights)"),
    cl::init(24), cl::cat(category));
cl::opt<bool> bf16Dot(
    "bf16-dot",
    cl::desc("Multiply bf16 rows by bf16 weights (and by FP8 weights in the "
             "packed GEMM) with vdpbf16ps where --cpu has AVX512-BF16 (false: "
             "widen both to f32, the same bits as on a CPU without it)"),
    cl::init(true), cl::cat(category));
cl::opt<Target> target(
    "target", cl::desc("Where the layer runs"), cl::init(Target::Cpu),
    cl::values(clEnumValN(Target::Cpu, "cpu", "host code"),
               clEnumValN(Target::Cuda, "cuda",
                          "CUDA kernels (a fatbin for --chip) + host code that "
                          "enqueues them on the caller's stream")),
    cl::cat(category));

cl::opt<std::string> chip(
    "chip",
    cl::desc("With --target cuda, the GPU to build the kernels for: sm_90a "
             "(H100/H200, default), sm_90, sm_89 or sm_80"),
    cl::init("sm_90a"), cl::cat(category));

cl::opt<std::string> gpuPrefillBlock(
    "gpu-prefill-block",
    cl::desc("With --target cuda, the prefill blocks of GEMMs of several "
             "experts: narrow (4 tiles of 16 rows by 64 columns) or RxC (up "
             "to R rows of one expert by C columns; R, C 32, 64 or 128; "
             "with wgmma RxC, R 64 or 128, C 64, 128 or 256). Default 128x256 "
             "with wgmma, else 64x128"),
    cl::init("64x128"), cl::cat(category));

cl::opt<int64_t>
    gpuPrefillStages("gpu-prefill-stages",
                     cl::desc("With --target cuda, the cp.async stages of the prefill GEMMs "
                              "(2-4; default 3)"),
                     cl::init(3), cl::cat(category));

cl::opt<int64_t> gpuPrefillStageDepth(
    "gpu-prefill-stage-depth",
    cl::desc("With --target cuda, the depth of a prefill block's stage (32 or "
             "64)"),
    cl::init(64), cl::cat(category));

cl::opt<std::string> gpuPrefillMma(
    "gpu-prefill-mma",
    cl::desc("With --target cuda, the prefill block's products: mma-sync "
             "(every chip) or wgmma (--chip sm_90a, its default; RxC blocks, "
             "R 64 or 128, C 64, 128 or 256, stages 64 deep)"),
    cl::init("mma-sync"), cl::cat(category));

cl::opt<bool> gpuFuseSwiglu(
    "gpu-fuse-swiglu",
    cl::desc("With --target cuda and wgmma prefill blocks, the SwiGLU in the "
             "first expert GEMM's epilogue (a block stages its gate and the "
             "matching up weight rows); not yet timed on a GPU"),
    cl::init(false), cl::cat(category));

cl::opt<bool>
    gpuSharedStream("gpu-shared-stream",
                    cl::desc("With --target cuda, the shared expert is built first and its "
                             "kernels run on a second stream beside the routing, dispatch and "
                             "routed experts, ordered by events (the runtime creates the "
                             "stream once per stream); not yet timed on a GPU"),
                    cl::init(false), cl::cat(category));

cl::opt<bool>
    gpuFp8Rows("gpu-fp8-rows",
               cl::desc("With --target cuda, wgmma prefill blocks and FP8 expert weights: "
                        "the prefill GEMMs quantize their rows per 128 of depth and multiply "
                        "E4M3 by E4M3 (wgmma k32); with --dispatch-quant the gate/up GEMM "
                        "reads the dispatch's codes as they came (UE8M0 scales per 32: a "
                        "scale per k32 product); not yet run on a GPU"),
               cl::init(false), cl::cat(category));

constexpr llvm::StringLiteral kChips[] = {"sm_90a", "sm_90", "sm_89", "sm_80"};

/// Whether the expert GEMM takes an FP8 dispatch's codes. On a GPU only
/// the FP8 rows GEMM (--gpu-fp8-rows) multiplies codes: elsewhere its
/// receiver dequantizes.
bool given(const cl::Option &option);

bool expertsReadCodes() {
  if (target == Target::Cuda)
    return fp8Gemm && (gpuFp8Rows || given(fp8Gemm)) && dispatchQuant != "none";
  return fp8Gemm;
}

moe::ParallelLayout layout() {
  return {ep, maxTokensPerRank, tp, physicalExperts, replicaSelection == "per-batch"};
}

int fail(const llvm::Twine &message) {
  llvm::errs() << "moe-compile: error: " << message << "\n";
  return 1;
}

/// Where a library looks for libmoert when not in the build (--model:
/// "$ORIGIN", next to itself in the output directory).
std::string layerRuntimeRpath;

/// The plan report, when --plan asks for one: staged in a temporary next to
/// its path before the main output is published (so that a bad --plan path
/// leaves an earlier output in place) and published after it (so that a
/// failed run leaves an earlier report in place).
std::optional<std::string> planText;

/// Writes `text` to `path` (or stdout for "-"), all or nothing.
int writeFile(llvm::StringRef path,
              llvm::function_ref<void(llvm::raw_ostream &)> print) {
  if (llvm::Error e = mlir::moe::writeOutputFile(path, print))
    return fail(llvm::toString(std::move(e)));
  return 0;
}

/// Runs `publishMain` between staging the plan report and publishing it.
int withPlan(llvm::function_ref<int()> publishMain) {
  if (!planText)
    return publishMain();
  auto print = [](llvm::raw_ostream &os) { os << *planText; };
  llvm::Expected<mlir::moe::StagedOutput> staged = mlir::moe::stageOutputFile(planFile, print);
  if (!staged)
    return fail(llvm::toString(staged.takeError()));
  if (int rc = publishMain())
    return rc; // the staged report goes with `staged`
  if (llvm::Error e = staged->publish())
    return fail(llvm::toString(std::move(e)));
  return 0;
}

/// Writes `text` to the output file (or stdout), and the plan report.
int writeText(llvm::function_ref<void(llvm::raw_ostream &)> print) {
  return withPlan([&] { return writeFile(outputFile, print); });
}

/// Moves a finished temporary file to the output path (a rename where both
/// are on one file system), and publishes the plan report.
int publish(llvm::StringRef temporary) {
  return withPlan([&] {
    if (llvm::Error e = mlir::moe::publishOutputFile(temporary, outputFile))
      return fail(llvm::toString(std::move(e)));
    return 0;
  });
}

bool given(const cl::Option &option) { return option.getNumOccurrences() > 0; }

/// Why a name the layer exports clashes with what it links, or none.
std::optional<std::string> reservedNameProblem(llvm::StringRef name) {
  for (llvm::StringRef prefix : {"moert_", "mgpu", "_mlir", "__", "llvm_"})
    if (name.starts_with(prefix))
      return ("'" + name + "' starts with '" + prefix +
              "', which the runtime and generated code reserve")
          .str();
  for (llvm::StringRef reserved :
       {"main", "malloc", "free", "calloc", "realloc", "aligned_alloc", "abort", "exit", "memcpy",
        "memmove", "memset", "printf", "puts", "putchar"})
    if (name == reserved)
      return ("'" + name + "' clashes with a C library function the layer links").str();
  return std::nullopt;
}

/// Checks --entry: a C identifier that clashes with nothing the layer links.
std::optional<std::string> entryProblem(llvm::StringRef name) {
  if (name.empty())
    return "--entry must name the layer function, got an empty name";
  if (name.size() > 200)
    return "--entry is longer than 200 characters";
  if (!(llvm::isAlpha(name[0]) || name[0] == '_') ||
      !llvm::all_of(name, [](char c) { return llvm::isAlnum(c) || c == '_'; }))
    return ("--entry must be a C identifier ([A-Za-z_][A-Za-z0-9_]*), got '" +
            name + "'")
        .str();
  if (std::optional<std::string> clash = reservedNameProblem(name))
    return "--entry " + *clash;
  return std::nullopt;
}

/// Checks the functions an .mlir input exports: none clashes with what the
/// layer links (an entry named `malloc` would replace the C library's), and
/// no layer hides in a nested module (only the top level's are compiled);
/// gives each its C interface.
LogicalResult prepareInputFunctions(ModuleOp module) {
  for (auto func : module.getOps<func::FuncOp>()) {
    if (!func.isPublic())
      continue;
    if (std::optional<std::string> clash = reservedNameProblem(func.getSymName()))
      return func.emitError("function @") << func.getSymName() << ": the name " << *clash;
    // The C entry `_mlir_ciface_<name>` (docs/Design.md) for every exported
    // layer function, as for --config inputs.
    if (!func.isExternal())
      func->setAttr("llvm.emit_c_interface", UnitAttr::get(func.getContext()));
  }
  for (auto nested : module.getOps<ModuleOp>()) {
    WalkResult found = nested.walk([](moe::LayerOp layer) {
      layer.emitError("moe-compile compiles the layers of the top-level module's functions; "
                      "this one is in a nested module");
      return WalkResult::interrupt();
    });
    if (found.wasInterrupted())
      return failure();
  }
  return success();
}

/// The expert-parallel options an .mlir input without an expert-parallel
/// layer would ignore (for --config inputs optionProblem checks --ep).
LogicalResult checkExpertParallelOptions(ModuleOp module) {
  bool acrossRanks = false;
  module.walk([&](Operation *op) {
    if (auto layer = dyn_cast<moe::LayerOp>(op))
      acrossRanks |= layer.getLayout().getEp() > 1;
    acrossRanks |= isa<moe::EpDispatchOp>(op);
    return acrossRanks ? WalkResult::interrupt() : WalkResult::advance();
  });
  if (acrossRanks)
    return success();
  for (cl::opt<bool> *option : {&epIntoBuffers, &epAllGather, &epPackInLayer})
    if (*option) {
      fail("--" + option->ArgStr +
           " applies to an expert-parallel layer: the input has none (no moe.layer with "
           "ep > 1, no moe.ep_dispatch)");
      return failure();
    }
  return success();
}

/// Checks the options on their own; the ones that need the config are
/// checked by configProblem.
std::optional<std::string> optionProblem() {
  using namespace moe::limits;
  if (int(!configFile.empty()) + int(!inputFile.empty()) + int(!modelDir.empty()) != 1)
    return "give exactly one input: --model DIR, --config config.json or an "
           ".mlir file";
  if (!modelDir.empty()) {
    if (emit != Emit::Shared)
      return "--model compiles a shared library (no --emit)";
    if (!planFile.empty())
      return "--model writes the plan into the output directory: no --plan";
    if (outputFile == "-")
      return "--model needs -o <directory>";
    if (ep > 1)
      return "--model writes one process's layer with every expert's weights: "
             "--ep > 1 is not supported with --model yet (use --config)";
  }
  if (dispatchQuant != "none" && dispatchQuant != "fp8-e4m3-g128" &&
      dispatchQuant != "fp8-e4m3-g32-ue8m0")
    return "--dispatch-quant must be none, fp8-e4m3-g128 or "
           "fp8-e4m3-g32-ue8m0, got '" + dispatchQuant + "'";
  if (ep < 1 || ep > kMaxRanks)
    return llvm::formatv("--ep must be in [1, {0}], got {1}", kMaxRanks,
                         ep.getValue()).str();
  if (tp < 1 || ep % tp != 0)
    return llvm::formatv("--tp must be positive and divide --ep ({0}), got {1}",
                         ep.getValue(), tp.getValue()).str();
  if (maxTokensPerRank < 1 || maxTokensPerRank > kMaxTokens)
    return llvm::formatv("--max-tokens-per-rank must be in [1, {0}], got {1}",
                         kMaxTokens, maxTokensPerRank.getValue()).str();
  if (rowTile < 1 || rowTile > 1024)
    return llvm::formatv("--row-tile must be in [1, 1024], got {0}", int64_t(rowTile)).str();
  if (packedMinRows < 0 || packedMinRows > kMaxTokens)
    return llvm::formatv("--packed-min-rows must be in [0, {0}], got {1}", kMaxTokens,
                         packedMinRows.getValue()).str();
  if (chunkBudget < 0)
    return llvm::formatv("--chunk-budget-bytes must be 0 (no limit) or "
                         "positive, got {0}", chunkBudget.getValue()).str();
  // A decode maximum above --max-tokens-per-rank is clamped to it.
  if (decodeMaxTokens < 0 || decodeMaxTokens > kMaxTokens)
    return llvm::formatv("--decode-max-tokens must be 0 (off) or positive up "
                         "to {0}, got {1}", kMaxTokens,
                         decodeMaxTokens.getValue()).str();
  if (physicalExperts < 0 || physicalExperts > kMaxExperts ||
      physicalExperts % ep != 0)
    return llvm::formatv("--physical-experts must be 0 or a multiple of --ep "
                         "up to {0}, got {1}", kMaxExperts,
                         physicalExperts.getValue()).str();
  // (.mlir inputs: --physical-experts is refused below, as the IR carries it.)
  if (physicalExperts > 0 && ep == 1 && inputFile.empty())
    return "--physical-experts places experts on EP ranks: it needs --ep > 1";
  if (std::optional<std::string> error =
          moe::checkGpuPrefillOptions(gpuPrefillBlock, gpuPrefillStages, gpuPrefillStageDepth,
                                      gpuPrefillMma))
    return "--gpu-" + *error;
  if (gpuPrefillMma == "wgmma" && chip != "sm_90a")
    return "--gpu-prefill-mma=wgmma needs --chip sm_90a, got " + chip.getValue();
  if (gpuFuseSwiglu && gpuPrefillMma != "wgmma")
    return "--gpu-fuse-swiglu fuses into wgmma blocks: it needs --gpu-prefill-mma=wgmma "
           "(--chip sm_90a)";
  if (gpuFp8Rows && gpuPrefillMma != "wgmma")
    return "--gpu-fp8-rows multiplies FP8 rows by wgmma: it needs --gpu-prefill-mma=wgmma "
           "(--chip sm_90a)";
  if (replicaSelection != "static" && replicaSelection != "per-batch")
    return "--replica-selection must be static or per-batch, got '" +
           replicaSelection + "'";
  if (replicaSelection == "per-batch" && physicalExperts == 0)
    return "--replica-selection=per-batch chooses among a placement's replicas: "
           "it needs --physical-experts";
  if (dtype != "f32" && dtype != "bf16")
    return "--dtype must be f32 or bf16, got '" + dtype + "'";
  if (routerDtype != "f32" && routerDtype != "bf16")
    return "--router-dtype must be f32 or bf16, got '" + routerDtype + "'";
  if (auto problem = entryProblem(entry))
    return problem;
  if (fp8Weights != "keep" && fp8Weights != "dequantize")
    return "--fp8-weights must be keep or dequantize, got '" + fp8Weights + "'";
  if (!fp8Gemm && dispatchQuant == "none")
    return "--fp8-gemm=false chooses how FP8 dispatches reach the GEMM: it "
           "needs --dispatch-quant";
  if (noTpDedupe && tp == 1)
    return "--no-tp-dedupe needs --tp > 1";
  // An .mlir input carries its layout: its ep_dispatch ops say what is exchanged.
  const bool layoutGiven = inputFile.empty();
  if (epIntoBuffers && ((layoutGiven && ep == 1) || target == Target::Cuda))
    return "--ep-into-buffers applies to --target cpu with --ep > 1 (--target "
           "cuda always exchanges into its workspace)";
  if (epAllGather && layoutGiven && (ep == 1 || decodeMaxTokens == 0))
    return "--ep-all-gather applies to the decode variant of an expert-parallel "
           "layer: it needs --ep > 1 and --decode-max-tokens";
  if (epAllGather && target == Target::Cpu && !epIntoBuffers)
    return "--ep-all-gather on --target cpu needs --ep-into-buffers (it exchanges "
           "into the layer's buffers, as on a GPU)";
  if (epPackInLayer && layoutGiven && ep == 1)
    return "--ep-pack-in-layer applies to an expert-parallel layer: it needs --ep > 1";
  if (epPackInLayer && target == Target::Cpu && !epIntoBuffers)
    return "--ep-pack-in-layer on --target cpu needs --ep-into-buffers (it exchanges "
           "into the layer's buffers, as on a GPU)";
  if (target == Target::Cuda && !llvm::is_contained(kChips, chip.getValue()))
    return "--chip must be one of sm_90a, sm_90, sm_89, sm_80, got '" + chip + "'";
  if (target == Target::Cpu && given(chip))
    return "--chip applies to --target cuda";
  if (emit == Emit::Launches && target != Target::Cuda)
    return "--emit=launches applies to --target cuda";
  if ((emit == Emit::Object || emit == Emit::Shared) && outputFile == "-")
    return "--emit=obj and --emit=shared need -o <path>";
  if (!planFile.empty() && configFile.empty())
    return "--plan needs --config";
  if (!planFile.empty() && planFile == outputFile)
    return "--plan and -o name the same file";
  if (!inputFile.empty() && inputFile != "-" &&
      (inputFile == outputFile ||
       llvm::sys::fs::equivalent(inputFile.getValue(), outputFile.getValue())))
    return "-o names the input file " + inputFile + ", which the output would replace";
  if (!inputFile.empty()) {
    // An .mlir input carries its layout, types and function names in the IR.
    const cl::Option *configOnlyOptions[] = {
        &ep, &tp, &dtype, &physicalExperts, &routerDtype, &replicaSelection, &entry, &fp8Weights};
    for (const cl::Option *option : configOnlyOptions)
      if (given(*option))
        return ("--" + option->ArgStr + " applies to --config inputs; an .mlir "
                "input carries it in its IR").str();
    if (given(maxTokensPerRank) && chunkBudget == 0)
      return "with an .mlir input, --max-tokens-per-rank only bounds "
             "--chunk-budget-bytes planning; give both or neither";
  }
  return std::nullopt;
}

/// Whether the layer of `config` reads its FP8 weights as codes and scales
/// (--fp8-weights).
bool keepFp8Weights(const moe::MoELayerConfig &config) {
  if (!config.fp8WeightBlocks || fp8Weights != "keep")
    return false;
  if (given(fp8Weights))
    return true;
  auto [blockRows, blockDepth] = *config.fp8WeightBlocks;
  return config.intermediateSize % blockRows == 0 &&
         (target == Target::Cpu || (blockRows % 32 == 0 && blockDepth % 32 == 0));
}

/// Checks the options against the model's config.
std::optional<std::string> configProblem(const moe::MoELayerConfig &config) {
  if (keepFp8Weights(config) &&
      config.intermediateSize % config.fp8WeightBlocks->first != 0)
    return llvm::formatv("--fp8-weights=keep: the scale blocks' {0} rows do not "
                         "divide the intermediate size {1}, so gate's and up's "
                         "blocks do not stack (use --fp8-weights=dequantize)",
                         config.fp8WeightBlocks->first, config.intermediateSize)
        .str();
  if (gpuFp8Rows && !keepFp8Weights(config))
    return "--gpu-fp8-rows multiplies FP8 expert weights' codes: the config has "
           "none kept as codes (it needs an FP8 quantization_config, and not "
           "--fp8-weights=dequantize)";
  if (ep > 1 && physicalExperts == 0 && config.numExperts % ep != 0)
    return llvm::formatv("--ep {0} does not divide the {1} experts of the "
                         "config", ep.getValue(), config.numExperts).str();
  if (physicalExperts > 0 && physicalExperts < config.numExperts)
    return llvm::formatv("--physical-experts {0} is fewer than the {1} "
                         "experts: every expert needs a slot",
                         physicalExperts.getValue(), config.numExperts).str();
  // With one rank nothing crosses a wire, and the plan reports "none".
  if (dispatchQuant != "none" && ep > 1) {
    int64_t group =
        moe::scaleGroup(*moe::parseWireFormat(dispatchQuant.getValue()));
    if (config.hiddenSize % group != 0)
      return llvm::formatv("--dispatch-quant {0} scales groups of {1} "
                           "elements: hidden size {2} is not a multiple",
                           dispatchQuant.getValue(), group,
                           config.hiddenSize).str();
  }
  return std::nullopt;
}

OwningOpRef<ModuleOp> loadInput(MLIRContext &context,
                                llvm::SourceMgr &sourceMgr,
                                std::optional<moe::MoELayerConfig> &config) {
  if (!configFile.empty()) {
    auto buffer = llvm::MemoryBuffer::getFile(configFile);
    if (!buffer) {
      fail("cannot read " + configFile + ": " + buffer.getError().message());
      return nullptr;
    }
    auto parsed = moe::parseHFConfig((*buffer)->getBuffer());
    if (!parsed) {
      fail(configFile + ": " + llvm::toString(parsed.takeError()));
      return nullptr;
    }
    config = *parsed;
    config->logitsBf16 = routerDtype == "bf16";
    config->keepFp8Weights = keepFp8Weights(*config);
    Type elem = dtype == "bf16" ? Type(BFloat16Type::get(&context))
                                : Type(Float32Type::get(&context));
    return moe::buildLayerModule(
        context, *config, layout(), elem, FileLineColLoc::get(&context, configFile, 1, 1),
        entry);
  }
  std::string error;
  auto buffer = openInputFile(inputFile, &error);
  if (!buffer) {
    fail(error);
    return nullptr;
  }
  sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  return parseSourceFile<ModuleOp>(sourceMgr, &context);
}
/// Where libmoert.so is: --runtime-dir, else `<tool dir>/../lib`.
std::string runtimeLibDir(const char *argv0) {
  if (!runtimeDir.empty())
    return runtimeDir;
  std::string self = llvm::sys::fs::getMainExecutable(
      argv0, reinterpret_cast<void *>(&runtimeLibDir));
  llvm::SmallString<256> dir(llvm::sys::path::parent_path(
      llvm::sys::path::parent_path(self)));
  llvm::sys::path::append(dir, "lib");
  return std::string(dir);
}
} // namespace

/// Whether bf16 GEMMs multiply bf16 pairs (vdpbf16ps) on `machine`.
bool usesBf16Dot(llvm::TargetMachine &machine) {
  return bf16Dot && moe_compile::hasBf16DotOf(machine);
}

/// --packed-min-rows, or its default: with bf16 dot products the register
/// tiles (no packing) lose to the packed GEMM from fewer rows on (one core,
/// Qwen3-like layer at T = 256: 192 ms from 24 rows, 178 from 12), and with
/// FP8 weights, which the register tiles decode for every 3 rows, from 4
/// (T = 128: 215 ms from 12 rows, 146 from 4).
int64_t packedMinRowsFor(llvm::TargetMachine &machine, bool fp8Weights) {
  if (packedMinRows.getNumOccurrences() || dtype != "bf16" || !usesBf16Dot(machine))
    return packedMinRows;
  return fp8Weights ? 4 : 12;
}

/// How the CPU code is generated: the decisions of convert-moe-to-cpu and
/// the dispatch layout they read.
llvm::json::Object codeGenerationReport(llvm::TargetMachine &machine, bool fp8Weights) {
  moe::CpuPipelineOptions defaults;
  int64_t lanes = moe_compile::vectorWidthOf(machine);
  return llvm::json::Object{
      {"cpu", machine.getTargetCPU().str()},
      {"vector_f32_lanes", lanes},
      {"dispatch_layout",
       llvm::json::Object{
           {"expert_offsets", "exclusive prefix sums of the per-expert row counts "
                              "(moe.dispatch result), read by both grouped GEMMs"},
           {"row_tile", int64_t(rowTile)},
           {"padding", rowTile > 1 ? "each expert's rows padded to a multiple of "
                                     "row_tile; padding rows are zero"
                                   : "none"}}},
      {"grouped_gemm",
       llvm::json::Object{
           {"register_tile_rows", int64_t(defaults.registerRows)},
           {"register_tile_weight_rows", int64_t(defaults.registerCols)},
           {"column_block", int64_t(defaults.columnBlock)},
           {"decode",
            "experts with fewer than register_tile_rows rows in a call: a weight "
            "row at a time in memory order, each of the expert's rows dotted "
            "with it on several independent vector accumulators along the depth"},
           {"packed_min_rows", packedMinRowsFor(machine, fp8Weights)},
           {"packed",
            "experts with at least packed_min_rows rows in a call: per work item "
            "(up to 192 rows of one expert by 4 panels of " + std::to_string(2 * lanes) +
            " output columns) each panel's weights packed transposed as f32 "
            "(as pairs of bf16 with vdpbf16ps) into a per-thread scratch, "
            "register tiles of 6 rows by the panel (outer products of a "
            "broadcast activation and two weight vectors)"},
           {"weight_layout", "HuggingFace [E, out, in] in memory; no pack step at "
                             "load: the packed GEMM packs a panel per row block"},
           {"bf16", usesBf16Dot(machine)
                        ? "pairs of bf16 products summed into f32 by vdpbf16ps "
                          "(AVX512-BF16) where both operands are bf16 (FP8 "
                          "weights: in the packed GEMM, as exact bf16), else "
                          "widened to f32 in registers"
                        : "widened to f32 in registers"}}},
      {"threads", "OpenMP worksharing loops over (column block, expert) work "
                  "items, over up to 64 slots of listed (row block, panels) work "
                  "items and over tokens; OMP_NUM_THREADS, default all cores"},
      {"llvm", "O3"}};
}

int compileLayer(const char *argv0);

/// The prefill GEMM options the user left out, for --chip: sm_90a takes
/// wgmma blocks of 128 x 256 (two warpgroups) in 3 stages (on an H200,
/// DeepSeek-V3's routed GEMMs at T = 4096 took 6.25 + 3.82 ms against
/// 6.56 + 3.75 with 64 x 256 in 2 stages, Qwen3-30B-A3B's 0.57 + 0.39
/// against 0.63 + 0.42; on an H100 64 x 256 took 7.75 + 4.25 ms against
/// 9.44 + 5.12 with 64 x 128 and 13.5 + 7.8 with mma.sync).
void setChipPrefillDefaults() {
  if (!given(gpuPrefillMma) && chip == "sm_90a")
    gpuPrefillMma = "wgmma";
  if (gpuPrefillMma != "wgmma")
    return;
  if (!given(gpuPrefillBlock))
    gpuPrefillBlock = "128x256";
  if (!given(gpuPrefillStages))
    gpuPrefillStages = 3;
}

/// The CUDA pipeline's options from the command line.
void setCudaPipelineOptions(moe::CudaPipelineOptions &options) {
  options.chip = chip;
  options.format = "fatbin";
  options.dispatchQuantization = dispatchQuant;
  options.prefillBlock = gpuPrefillBlock;
  options.prefillStages = gpuPrefillStages;
  options.prefillStageDepth = gpuPrefillStageDepth;
  options.prefillMma = gpuPrefillMma;
  options.fuseSwiglu = gpuFuseSwiglu;
  options.fp8Rows = gpuFp8Rows;
  options.fp8Gemm = expertsReadCodes();
  options.dedupeTp = !noTpDedupe;
  options.epAllGather = epAllGather;
  options.epPackInLayer = epPackInLayer;
  options.sharedStream = gpuSharedStream;
}

/// What the plan report says of a GPU library: its calling convention and
/// the workspace it needs at --max-tokens-per-rank (its
/// `<entry>_workspace_bytes`, folded at that token count).
llvm::Expected<llvm::json::Object> gpuReport(ModuleOp module) {
  OwningOpRef<ModuleOp> clone = module.clone();
  PassManager pm(module.getContext());
  moe::CudaPipelineOptions options;
  setCudaPipelineOptions(options);
  options.stopAfterHostABI = true;
  if (failed(moe::buildCudaPipeline(pm, options)) || failed(pm.run(*clone)))
    return llvm::createStringError("the GPU calling convention could not be built");
  std::string name = entry + "_workspace_bytes";
  auto size = clone->lookupSymbol<func::FuncOp>(name);
  if (!size)
    return llvm::createStringError("no " + name + " was built");
  OpBuilder b(size.getBody());
  Value tokens = arith::ConstantIndexOp::create(b, size.getLoc(), maxTokensPerRank);
  size.getArgument(0).replaceAllUsesWith(tokens);
  (void)applyPatternsGreedily(size, RewritePatternSet(module.getContext()));
  IntegerAttr bytes;
  auto ret = cast<func::ReturnOp>(size.getBody().front().getTerminator());
  if (!matchPattern(ret.getOperand(0), m_Constant(&bytes)))
    return llvm::createStringError(name + " did not fold to a constant");
  return llvm::json::Object{
      {"chip", chip.getValue()},
      {"entry_abi", "device pointers: the parameters, then y[T,H] and the workspace (i8 "
                    "memref), then the CUstream to enqueue on; no result; the call "
                    "returns without synchronising"},
      {"workspace_function", name + "(tokens) -> bytes"},
      {"workspace_bytes_at_max_tokens", bytes.getInt()},
      {"max_tokens", int64_t(maxTokensPerRank)},
      {"kernels", gpuPrefillMma == "wgmma"
                      ? "bf16 expert and router GEMMs on tensor cores (mma.sync m16n8k16; "
                        "the expert GEMMs' prefill forms wgmma.mma_async m64nNk16), rows "
                        "padded to tiles of 16 per expert; the rest one thread per element, "
                        "128 per block"
                      : "bf16 expert and router GEMMs on tensor cores (mma.sync m16n8k16), "
                        "rows padded to tiles of 16 per expert; the rest one thread per "
                        "element, 128 per block"},
      {"prefill_gemm", llvm::json::Object{{"block", gpuPrefillBlock.getValue()},
                                          {"stages", int64_t(gpuPrefillStages)},
                                          {"stage_depth", int64_t(gpuPrefillStageDepth)},
                                          {"mma", gpuPrefillMma.getValue()},
                                          {"fuse_swiglu", bool(gpuFuseSwiglu)},
                                          {"fp8_rows", bool(gpuFp8Rows)}}},
      {"shared_expert_stream",
       gpuSharedStream ? "a second stream, ordered by events" : "the entry's"}};
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  registerPassManagerCLOptions();
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  // --help lists moe-compile's own options; LLVM's and MLIR's stay usable
  // and are listed by --help-hidden.
  for (auto &[name, option] : cl::getRegisteredOptions())
    if (!llvm::is_contained(option->Categories, &category) &&
        !name.starts_with("help") && name != "version")
      option->setHiddenFlag(cl::Hidden);
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "moe-compile " MOE_VERSION " (LLVM/MLIR " LLVM_VERSION_STRING ")\n";
  });
  cl::ParseCommandLineOptions(argc, argv, "moe-compile: MoE layer compiler\n");
  setChipPrefillDefaults();
  if (auto problem = optionProblem())
    return fail(*problem);
  if (!modelDir.empty())
    return moe_compile::compileModel(
        modelDir, outputFile,
        [&](const moe::MoELayerConfig &config) { return configProblem(config); },
        [&](llvm::StringRef config, llvm::StringRef library, llvm::StringRef plan) {
          configFile = config.str();
          outputFile = library.str();
          planFile = plan.str();
          layerRuntimeRpath = "$ORIGIN";
          return compileLayer(argv[0]);
        },
        entry, dtype, runtimeLibDir(argv[0]), keepFp8Weights, target == Target::Cuda);
  return compileLayer(argv[0]);
}

/// Compiles the input (--config or .mlir) to the output path.
int compileLayer(const char *argv0) {
  DialectRegistry registry;
  moe::registerMoECompilerDialects(registry);
  moe::registerMoECompilerPasses();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);

  std::optional<moe::MoELayerConfig> config;
  OwningOpRef<ModuleOp> module = loadInput(context, sourceMgr, config);
  if (!module)
    return 1;
  if (config)
    if (auto problem = configProblem(*config))
      return fail(configFile + ": " + *problem);
  if (failed(verify(*module)) ||
      (!inputFile.empty() &&
       (failed(prepareInputFunctions(*module)) || failed(checkExpertParallelOptions(*module)))))
    return 1;

  // Phase variants first, so that chunking plans each of them.
  PassManager planning(&context);
  if (decodeMaxTokens > 0) {
    moe::MoESpecializePhaseOptions options;
    options.decodeMaxTokens = decodeMaxTokens;
    planning.addPass(moe::createMoESpecializePhase(options));
  }
  if (chunkBudget > 0) {
    moe::MoEPlanChunksOptions options;
    options.budgetBytes = chunkBudget;
    options.maxTokensPerRank = maxTokensPerRank;
    planning.addPass(moe::createMoEPlanChunks(options));
  }
  if (failed(planning.run(*module)))
    return 1;

  auto machine = moe_compile::createTargetMachine(cpu);
  if (!machine)
    return fail(llvm::toString(machine.takeError()));
  if (!planFile.empty()) {
    llvm::Expected<llvm::json::Value> report = moe_compile::planReport(
        *module, *config, layout(), dtype, dispatchQuant, expertsReadCodes(), !noTpDedupe, entry,
        decodeMaxTokens, epAllGather, epPackInLayer);
    if (!report)
      return fail(llvm::toString(report.takeError()));
    if (target == Target::Cpu)
      (*report->getAsObject())["code_generation"] =
          codeGenerationReport(**machine, config->keepFp8Weights);
    else {
      llvm::Expected<llvm::json::Object> gpu = gpuReport(*module);
      if (!gpu)
        return fail(llvm::toString(gpu.takeError()));
      (*report->getAsObject())["gpu"] = std::move(*gpu);
    }
    planText = llvm::formatv("{0:2}\n", *report);
  }
  if (emit == Emit::Mlir)
    return writeText([&](llvm::raw_ostream &os) { module->print(os); });

  PassManager pm(&context);
  if (failed(applyPassManagerCLOptions(pm)))
    return 1;
  moe::CpuPipelineOptions cpuOptions;
  cpuOptions.vectorWidth = moe_compile::vectorWidthOf(**machine);
  cpuOptions.bf16Dot = usesBf16Dot(**machine);
  cpuOptions.rowTile = rowTile;
  cpuOptions.packedMinRows = packedMinRowsFor(**machine, config && config->keepFp8Weights);
  cpuOptions.dispatchQuantization = dispatchQuant;
  cpuOptions.dedupeTp = !noTpDedupe;
  cpuOptions.fp8Gemm = expertsReadCodes();
  cpuOptions.epIntoBuffers = epIntoBuffers;
  cpuOptions.epAllGather = epAllGather;
  cpuOptions.epPackInLayer = epPackInLayer;
  moe::CudaPipelineOptions cudaOptions;
  setCudaPipelineOptions(cudaOptions);
  cudaOptions.stopBeforeOutlining = emit == Emit::Launches;
  LogicalResult built = target == Target::Cpu ? moe::buildCpuPipeline(pm, cpuOptions)
                                              : moe::buildCudaPipeline(pm, cudaOptions);
  if (failed(built) || failed(pm.run(*module)))
    return fail("lowering failed");
  if (emit == Emit::Lowered || emit == Emit::Launches)
    return writeText([&](llvm::raw_ostream &os) { module->print(os); });

  llvm::LLVMContext llvmContext;
  auto llvmModule = moe_compile::translateForHost(*module, llvmContext);
  if (!llvmModule)
    return fail(llvm::toString(llvmModule.takeError()));
  if (emit == Emit::LLVMIR) {
    moe_compile::optimize(**llvmModule, **machine);
    return writeText([&](llvm::raw_ostream &os) { (*llvmModule)->print(os, nullptr); });
  }

  // Objects and libraries go to temporaries next to the output first, so that
  // a failure leaves nothing at the output path. A library is compiled on
  // every core (one object per part of the module); an object file in one.
  unsigned parts = emit == Emit::Shared ? std::clamp(std::thread::hardware_concurrency(), 1u, 8u) : 1;
  std::string pattern = mlir::moe::temporaryPattern(outputFile);
  llvm::SmallVector<std::string> objects;
  std::deque<llvm::FileRemover> removers;
  for (unsigned i = 0; i < parts + (emit == Emit::Shared); ++i) {
    llvm::SmallString<128> path;
    if (std::error_code ec = llvm::sys::fs::createUniqueFile(pattern, path))
      return fail("cannot create a temporary file next to " + outputFile + ": " + ec.message());
    removers.emplace_back(path);
    objects.push_back(path.str().str());
  }
  std::string library = emit == Emit::Shared ? objects.pop_back_val() : "";
  if (parts == 1) {
    moe_compile::optimize(**llvmModule, **machine);
    if (llvm::Error e = moe_compile::writeObject(**llvmModule, **machine, objects[0]))
      return fail(llvm::toString(std::move(e)));
  } else if (llvm::Error e = moe_compile::writeObjectsInParallel(std::move(*llvmModule),
                                                                 cpu, objects)) {
    return fail(llvm::toString(std::move(e)));
  }
  if (emit == Emit::Object)
    return publish(objects[0]);
  if (llvm::Error e = moe_compile::linkShared(objects, library, runtimeLibDir(argv0),
                                              layerRuntimeRpath, target == Target::Cuda))
    return fail(llvm::toString(std::move(e)));
  return publish(library);
}
