//===- ObjectEmitter.cpp - LLVM dialect module to object / shared library -===//
#include "ObjectEmitter.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/Transforms/Utils/SplitModule.h"

#include <thread>

using namespace llvm;

namespace {
Error emitterError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}
} // namespace

Expected<std::unique_ptr<Module>>
moe_compile::translateForHost(mlir::ModuleOp module, LLVMContext &context) {
  // Argument facts for moe passes (e.g. moe.uniform) mean nothing to LLVM.
  module.walk([](mlir::FunctionOpInterface func) {
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      for (mlir::NamedAttribute attr : func.getArgAttrs(i))
        if (attr.getName().strref().starts_with("moe."))
          func.removeArgAttr(i, attr.getName());
  });
  std::unique_ptr<Module> llvmModule =
      mlir::translateModuleToLLVMIR(module, context, "moe_layer");
  if (!llvmModule)
    return emitterError("translation to LLVM IR failed");
  llvmModule->setTargetTriple(Triple(sys::getDefaultTargetTriple()));
  return llvmModule;
}

Expected<std::unique_ptr<TargetMachine>>
moe_compile::createTargetMachine(StringRef cpu) {
  InitializeNativeTarget();
  InitializeNativeTargetAsmPrinter();
  Triple triple(sys::getDefaultTargetTriple());
  std::string error;
  const Target *target = TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return emitterError("no target for " + triple.str() + ": " + error);
  std::string name = cpu.str(), features;
  if (cpu == "host") {
    name = sys::getHostCPUName().str();
    SubtargetFeatures list;
    for (const auto &[feature, enabled] : sys::getHostCPUFeatures())
      list.AddFeature(feature, enabled);
    features = list.getString();
  } else if (std::unique_ptr<MCSubtargetInfo> generic(
                 target->createMCSubtargetInfo(triple, "", ""));
             !generic || !generic->isCPUStringValid(name)) {
    return emitterError("--cpu: '" + cpu + "' is not a CPU LLVM knows for " +
                        triple.str() + " (try host, x86-64-v3 or skylake-avx512)");
  }
  TargetOptions options;
  std::unique_ptr<TargetMachine> machine(target->createTargetMachine(
      triple, name, features, options, Reloc::PIC_, std::nullopt,
      CodeGenOptLevel::Aggressive));
  if (!machine)
    return emitterError("cannot create a target machine for --cpu=" + cpu);
  return machine;
}

int64_t moe_compile::vectorWidthOf(const TargetMachine &machine) {
  const MCSubtargetInfo *info = machine.getMCSubtargetInfo();
  if (info->checkFeatures("+avx512f"))
    return 16;
  if (info->checkFeatures("+avx"))
    return 8;
  return 4;
}

bool moe_compile::hasBf16DotOf(const TargetMachine &machine) {
  return vectorWidthOf(machine) == 16 &&
         machine.getMCSubtargetInfo()->checkFeatures("+avx512bf16");
}

void moe_compile::optimize(Module &module, TargetMachine &machine) {
  module.setDataLayout(machine.createDataLayout());
  LoopAnalysisManager loops;
  FunctionAnalysisManager functions;
  CGSCCAnalysisManager cgscc;
  ModuleAnalysisManager modules;
  PassBuilder builder(&machine);
  builder.registerModuleAnalyses(modules);
  builder.registerCGSCCAnalyses(cgscc);
  builder.registerFunctionAnalyses(functions);
  builder.registerLoopAnalyses(loops);
  builder.crossRegisterProxies(loops, functions, cgscc, modules);
  builder.buildPerModuleDefaultPipeline(OptimizationLevel::O3)
      .run(module, modules);
}

Error moe_compile::writeObject(Module &module, TargetMachine &machine,
                               StringRef path) {
  module.setDataLayout(machine.createDataLayout());
  std::error_code ec;
  ToolOutputFile out(path, ec, sys::fs::OF_None);
  if (ec)
    return emitterError("cannot open " + path + ": " + ec.message());
  legacy::PassManager pm;
  if (machine.addPassesToEmitFile(pm, out.os(), nullptr,
                                  CodeGenFileType::ObjectFile))
    return emitterError("the target cannot emit object files");
  pm.run(module);
  out.keep();
  return Error::success();
}

Error moe_compile::writeObjectsInParallel(std::unique_ptr<Module> module,
                                          StringRef cpu, ArrayRef<std::string> paths) {
  // LLVM contexts are not shared between threads: each part travels as
  // bitcode into a context of its own.
  SmallVector<SmallString<0>> parts;
  SplitModule(*module, paths.size(), [&](std::unique_ptr<Module> part) {
    raw_svector_ostream os(parts.emplace_back());
    WriteBitcodeToFile(*part, os);
  }, /*PreserveLocals=*/false, /*RoundRobin=*/true);
  module.reset();
  std::vector<std::string> failures(parts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < parts.size(); ++i)
    threads.emplace_back([&, i] {
      LLVMContext context;
      Expected<std::unique_ptr<Module>> part =
          parseBitcodeFile(MemoryBufferRef(parts[i], "part"), context);
      if (!part) {
        failures[i] = toString(part.takeError());
        return;
      }
      Expected<std::unique_ptr<TargetMachine>> machine = createTargetMachine(cpu);
      if (!machine) {
        failures[i] = toString(machine.takeError());
        return;
      }
      optimize(**part, **machine);
      if (Error error = writeObject(**part, **machine, paths[i]))
        failures[i] = toString(std::move(error));
    });
  for (std::thread &thread : threads)
    thread.join();
  for (const std::string &failure : failures)
    if (!failure.empty())
      return emitterError(failure);
  return Error::success();
}

Error moe_compile::linkShared(ArrayRef<std::string> objectPaths, StringRef path,
                              StringRef runtimeDir, StringRef runtimeRpath, bool cuda) {
  ErrorOr<std::string> cc = sys::findProgramByName("cc");
  if (!cc)
    return emitterError("cannot link a shared library: no 'cc' on PATH");
  std::string libDir = ("-L" + runtimeDir).str();
  std::string rpath =
      ("-Wl,-rpath," + (runtimeRpath.empty() ? runtimeDir : runtimeRpath)).str();
  // LLVM's OpenMP runtime: the worksharing loops call __kmpc_* entries.
  std::string ompDir = "-L" MOE_OPENMP_LIBDIR, ompRpath = "-Wl,-rpath," MOE_OPENMP_LIBDIR;
  // Every layer allocates through the runtime (its heap is measured).
  // -Bsymbolic: the entry's calls into its own functions (the C interface
  // calls the layer by its name) bind inside the library, so another layer
  // of the same entry name in the global scope cannot take them.
  SmallVector<StringRef> args = {*cc, "-shared", "-Wl,-Bsymbolic", "-o", path};
  args.append(objectPaths.begin(), objectPaths.end());
  // A GPU layer's host code only launches kernels through the mgpu* entries
  // of libmoert_cuda (which find the driver at run time); no OpenMP.
  if (cuda)
    args.append({libDir, rpath, "-lmoert_cuda", "-lmoert"});
  else
    args.append({libDir, rpath, ompDir, ompRpath, "-lmoert", "-lomp", "-lm"});
  if (sys::fs::exists(MOE_BUILTINS_LIB))
    args.push_back(MOE_BUILTINS_LIB);
  std::string message;
  int rc = sys::ExecuteAndWait(*cc, args, std::nullopt, {}, 0, 0, &message);
  if (rc != 0)
    return emitterError("linking " + path + " failed (" + Twine(rc) + ") " + message);
  return Error::success();
}
