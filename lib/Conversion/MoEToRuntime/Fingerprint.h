//===- Fingerprint.h - a layer's fingerprint for the ranks' agreement -*- C++ -*-===//
#ifndef MOE_LIB_CONVERSION_MOETORUNTIME_FINGERPRINT_H
#define MOE_LIB_CONVERSION_MOETORUNTIME_FINGERPRINT_H

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>

namespace mlir::moe {
/// The module attribute moe-fingerprint sets.
inline constexpr const char kFingerprintAttr[] = "moe.fingerprint";

/// xxh3 of `module` printed with fixed flags, its kFingerprintAttr left out,
/// and of `options` (what else decides the layer); never 0 (a plan's
/// "none"). The same in every process for the same IR and options.
int64_t fingerprintOf(ModuleOp module, llvm::StringRef options = "");
} // namespace mlir::moe

#endif // MOE_LIB_CONVERSION_MOETORUNTIME_FINGERPRINT_H
