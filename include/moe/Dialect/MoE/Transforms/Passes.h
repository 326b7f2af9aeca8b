//===- Passes.h - moe transformation passes ---------------------*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_TRANSFORMS_PASSES_H
#define MOE_DIALECT_MOE_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::moe {
#define GEN_PASS_DECL
#include "moe/Dialect/MoE/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moe/Dialect/MoE/Transforms/Passes.h.inc"
} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_TRANSFORMS_PASSES_H
