//===- ObjectEmitter.h - LLVM dialect module to object / shared library ---===//
#ifndef MOE_TOOLS_MOECOMPILE_OBJECTEMITTER_H
#define MOE_TOOLS_MOECOMPILE_OBJECTEMITTER_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <memory>

namespace llvm {
class LLVMContext;
class Module;
class TargetMachine;
} // namespace llvm

namespace moe_compile {

/// The CPU the code is generated for: `host` (this machine's CPU and
/// features), or an LLVM CPU name such as `x86-64-v3` (AVX2 + FMA, a
/// portable baseline for distribution) or `skylake-avx512`.
llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
createTargetMachine(llvm::StringRef cpu);

/// f32 lanes of the widest vectors `machine` has (16, 8 or 4).
int64_t vectorWidthOf(const llvm::TargetMachine &machine);

/// Whether the target multiplies bf16 pairs into f32 on 16 lanes
/// (AVX512-BF16's vdpbf16ps).
bool hasBf16DotOf(const llvm::TargetMachine &machine);

/// Translates a module in the LLVM dialect to LLVM IR for the host.
llvm::Expected<std::unique_ptr<llvm::Module>>
translateForHost(mlir::ModuleOp module, llvm::LLVMContext &context);

/// Runs LLVM's O3 pipeline for `machine` on `module`.
void optimize(llvm::Module &module, llvm::TargetMachine &machine);

/// Writes `module` as an object file for `machine` to `path`.
llvm::Error writeObject(llvm::Module &module, llvm::TargetMachine &machine,
                        llvm::StringRef path);

/// Optimizes and writes `module` as one object file per path, on as many
/// threads: the module is split by functions (locals become hidden globals),
/// and each part is optimized and compiled in its own LLVM context.
llvm::Error writeObjectsInParallel(std::unique_ptr<llvm::Module> module,
                                   llvm::StringRef cpu,
                                   llvm::ArrayRef<std::string> paths);

/// Links the objects at `objectPaths` into a shared library at `path` with
/// the system C compiler driver (`cc`), against libmoert in `runtimeDir` and
/// LLVM's OpenMP runtime (the layer's threads). The library finds libmoert
/// at `runtimeRpath` when given (e.g. "$ORIGIN"), else in `runtimeDir`.
/// A `cuda` layer links libmoert_cuda (the mgpu* launch entries) instead of
/// OpenMP.
llvm::Error linkShared(llvm::ArrayRef<std::string> objectPaths, llvm::StringRef path,
                       llvm::StringRef runtimeDir, llvm::StringRef runtimeRpath = "",
                       bool cuda = false);

} // namespace moe_compile

#endif // MOE_TOOLS_MOECOMPILE_OBJECTEMITTER_H
