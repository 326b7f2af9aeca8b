//===- ObjectEmitter.h - LLVM dialect module to object / shared library ---===//
#ifndef MOE_TOOLS_MOECOMPILE_OBJECTEMITTER_H
#define MOE_TOOLS_MOECOMPILE_OBJECTEMITTER_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <memory>

namespace llvm {
class LLVMContext;
class Module;
} // namespace llvm

namespace moe_compile {

/// Translates a module in the LLVM dialect to LLVM IR for the host.
llvm::Expected<std::unique_ptr<llvm::Module>>
translateForHost(mlir::ModuleOp module, llvm::LLVMContext &context);

/// Writes `module` as a host object file to `path`.
llvm::Error writeObject(llvm::Module &module, llvm::StringRef path);

/// Links the object at `objectPath` into a shared library at `path` with the
/// system C compiler driver (`cc`), against libmoert in `runtimeDir` when the
/// code calls the runtime.
llvm::Error linkShared(llvm::StringRef objectPath, llvm::StringRef path,
                       llvm::StringRef runtimeDir);

} // namespace moe_compile

#endif // MOE_TOOLS_MOECOMPILE_OBJECTEMITTER_H
