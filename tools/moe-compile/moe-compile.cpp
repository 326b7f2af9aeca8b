//===- moe-compile.cpp - ahead-of-time compiler for MoE layers ------------===//
//
// Input: a HuggingFace config.json (--config) or a .mlir file in the moe
// dialect. Output: the moe IR, the lowered IR, LLVM IR, an object file or a
// shared library whose C entry point computes the layer, plus a JSON plan.
// Outputs are written only when compilation succeeds.
//
//===----------------------------------------------------------------------===//
#include "ObjectEmitter.h"
#include "PlanReport.h"
#include "moe/Dialect/MoE/Transforms/Passes.h"
#include "moe/Import/HFConfig.h"
#include "moe/InitAll.h"
#include "moe/Pipelines/Pipelines.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;
namespace cl = llvm::cl;

namespace {
enum class Emit { Mlir, Lowered, LLVMIR, Object, Shared };
enum class Target { Cpu, Cuda };

cl::OptionCategory category("moe-compile options");
cl::opt<std::string> inputFile(cl::Positional, cl::desc("[input.mlir]"),
                               cl::init(""), cl::cat(category));
cl::opt<std::string> configFile("config",
                                cl::desc("HuggingFace config.json of a MoE model"),
                                cl::value_desc("path"), cl::cat(category));
cl::opt<std::string> outputFile("o", cl::desc("Output file"),
                                cl::value_desc("path"), cl::init("-"),
                                cl::cat(category));
cl::opt<std::string> planFile("plan", cl::desc("Write the JSON plan report here"),
                              cl::value_desc("path"), cl::cat(category));
cl::opt<std::string> dtype("dtype", cl::desc("Element type of activations and "
                                             "weights: f32 or bf16"),
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
cl::opt<bool> fp8Gemm(
    "fp8-gemm",
    cl::desc("With --dispatch-quant, the expert GEMM reads the FP8 codes and "
             "scales as they arrived (=false: the receiver dequantizes)"),
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
cl::opt<std::string> entry("entry", cl::desc("Name of the layer function"),
                           cl::init("moe_layer"), cl::cat(category));
cl::opt<Emit> emit(
    "emit", cl::desc("What to produce"), cl::init(Emit::Shared),
    cl::values(clEnumValN(Emit::Mlir, "mlir", "moe dialect IR"),
               clEnumValN(Emit::Lowered, "lowered", "IR after the pipeline"),
               clEnumValN(Emit::LLVMIR, "llvmir", "LLVM IR (cpu)"),
               clEnumValN(Emit::Object, "obj", "object file (cpu)"),
               clEnumValN(Emit::Shared, "shared", "shared library (cpu)")),
    cl::cat(category));
cl::opt<Target> target(
    "target", cl::desc("Where the layer runs"), cl::init(Target::Cpu),
    cl::values(clEnumValN(Target::Cpu, "cpu", "host code"),
               clEnumValN(Target::Cuda, "cuda", "CUDA kernels (PTX) + host")),
    cl::cat(category));

moe::ParallelLayout layout() { return {ep, maxTokensPerRank, tp, physicalExperts}; }

int fail(const llvm::Twine &message) {
  llvm::errs() << "moe-compile: error: " << message << "\n";
  return 1;
}

/// Writes `text` to the output file (or stdout), all or nothing.
int writeText(llvm::function_ref<void(llvm::raw_ostream &)> print) {
  std::string error;
  auto out = openOutputFile(outputFile, &error);
  if (!out)
    return fail(error);
  print(out->os());
  out->keep();
  return 0;
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

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  registerPassManagerCLOptions();
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  cl::ParseCommandLineOptions(argc, argv, "moe-compile: MoE layer compiler\n");
  if (configFile.empty() == inputFile.empty())
    return fail("give exactly one input: --config config.json or an .mlir file");
  if (dispatchQuant != "none" && dispatchQuant != "fp8-e4m3-g128" &&
      dispatchQuant != "fp8-e4m3-g32-ue8m0")
    return fail("--dispatch-quant must be none, fp8-e4m3-g128 or "
                "fp8-e4m3-g32-ue8m0, got '" + dispatchQuant + "'");
  if (ep < 1 || maxTokensPerRank < 1 || tp < 1)
    return fail("--ep, --tp and --max-tokens-per-rank must be positive");
  if (physicalExperts < 0 || (physicalExperts && physicalExperts % ep != 0))
    return fail("--physical-experts must be 0 or a multiple of --ep");
  if (decodeMaxTokens < 0)
    return fail("--decode-max-tokens must be 0 (off) or positive");
  if (dtype != "f32" && dtype != "bf16")
    return fail("--dtype must be f32 or bf16, got '" + dtype + "'");
  if (target == Target::Cuda && emit != Emit::Mlir && emit != Emit::Lowered)
    return fail("--target=cuda produces IR with embedded PTX: use "
                "--emit=lowered");
  if ((emit == Emit::Object || emit == Emit::Shared) && outputFile == "-")
    return fail("--emit=obj and --emit=shared need -o <path>");

  DialectRegistry registry;
  moe::registerMoECompilerDialects(registry);
  moe::registerMoECompilerPasses();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);

  std::optional<moe::MoELayerConfig> config;
  OwningOpRef<ModuleOp> module = loadInput(context, sourceMgr, config);
  if (!module || failed(verify(*module)))
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

  if (!planFile.empty()) {
    if (!config)
      return fail("--plan needs --config");
    std::string error;
    auto out = openOutputFile(planFile, &error);
    if (!out)
      return fail(error);
    out->os() << llvm::formatv("{0:2}", moe_compile::planReport(
                                           *module, *config, layout(), dtype,
                                           dispatchQuant, !noTpDedupe, entry,
                                           decodeMaxTokens))
              << "\n";
    out->keep();
  }
  if (emit == Emit::Mlir)
    return writeText([&](llvm::raw_ostream &os) { module->print(os); });

  PassManager pm(&context);
  if (failed(applyPassManagerCLOptions(pm)))
    return 1;
  moe::CpuPipelineOptions cpuOptions;
  cpuOptions.dispatchQuantization = dispatchQuant;
  cpuOptions.dedupeTp = !noTpDedupe;
  cpuOptions.fp8Gemm = fp8Gemm;
  LogicalResult built =
      target == Target::Cpu ? moe::buildCpuPipeline(pm, cpuOptions)
                            : moe::buildCudaPipeline(pm, moe::CudaPipelineOptions());
  if (failed(built) || failed(pm.run(*module)))
    return fail("lowering failed");
  if (emit == Emit::Lowered)
    return writeText([&](llvm::raw_ostream &os) { module->print(os); });

  llvm::LLVMContext llvmContext;
  auto llvmModule = moe_compile::translateForHost(*module, llvmContext);
  if (!llvmModule)
    return fail(llvm::toString(llvmModule.takeError()));
  if (emit == Emit::LLVMIR)
    return writeText([&](llvm::raw_ostream &os) { (*llvmModule)->print(os, nullptr); });
  if (emit == Emit::Object) {
    if (llvm::Error e = moe_compile::writeObject(**llvmModule, outputFile))
      return fail(llvm::toString(std::move(e)));
    return 0;
  }

  // Shared library: object and library go to temporaries first, so that a
  // failure leaves nothing at the output path.
  llvm::SmallString<128> object, library;
  if (llvm::sys::fs::createTemporaryFile("moe-layer", "o", object) ||
      llvm::sys::fs::createTemporaryFile("moe-layer", "so", library))
    return fail("cannot create temporary files");
  llvm::FileRemover removeObject(object), removeLibrary(library);
  if (llvm::Error e = moe_compile::writeObject(**llvmModule, object))
    return fail(llvm::toString(std::move(e)));
  if (llvm::Error e = moe_compile::linkShared(object, library, runtimeLibDir(argv[0])))
    return fail(llvm::toString(std::move(e)));
  if (std::error_code ec = llvm::sys::fs::copy_file(library, outputFile))
    return fail("cannot write " + outputFile + ": " + ec.message());
  return 0;
}
