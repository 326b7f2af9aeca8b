//===- Passes.h - moe conversion passes -------------------------*- C++ -*-===//
#ifndef MOE_CONVERSION_PASSES_H
#define MOE_CONVERSION_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::moe {
#define GEN_PASS_DECL
#include "moe/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

#endif // MOE_CONVERSION_PASSES_H
