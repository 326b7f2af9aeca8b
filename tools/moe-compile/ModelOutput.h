//===- ModelOutput.h - moe-compile --model: a checkpoint to a directory ---===//
#ifndef MOE_TOOLS_MOE_COMPILE_MODELOUTPUT_H
#define MOE_TOOLS_MOE_COMPILE_MODELOUTPUT_H

#include "moe/Import/HFConfig.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace moe_compile {

/// Checks the compile options against a model's config.
using ConfigCheck = llvm::function_ref<std::optional<std::string>(
    const mlir::moe::MoELayerConfig &)>;
/// Whether the layer of a config reads FP8 weights as codes and scales.
using KeepFp8Weights = llvm::function_ref<bool(const mlir::moe::MoELayerConfig &)>;
/// Compiles the layer of `config` into `library`, its plan into `plan`.
using CompileLayer = llvm::function_ref<int(
    llvm::StringRef config, llvm::StringRef library, llvm::StringRef plan)>;

/// moe-compile --model DIR -o OUT: checks every MoE layer's tensors in the
/// checkpoint, compiles the layer once (all MoE layers of a model share its
/// shape), writes the layers' weights in the layer's layout and dtype to
/// OUT/weights.safetensors and OUT/manifest.json, with a copy of libmoert
/// (and for a CUDA library, `cuda`, of libmoert_cuda) that the library finds
/// next to itself ($ORIGIN), so that OUT can be moved or shipped. Everything is written to a
/// temporary directory next to OUT first: a failure leaves no OUT behind; an
/// earlier moe-compile output at OUT is replaced. Returns the exit code.
int compileModel(llvm::StringRef dir, llvm::StringRef out, ConfigCheck check, CompileLayer compile,
                 llvm::StringRef entry, llvm::StringRef dtype, llvm::StringRef runtimeDir,
                 KeepFp8Weights keepFp8Weights, bool cuda);

} // namespace moe_compile

#endif // MOE_TOOLS_MOE_COMPILE_MODELOUTPUT_H
