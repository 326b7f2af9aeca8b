//===- Passes.h - moe transformation passes ---------------------*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_TRANSFORMS_PASSES_H
#define MOE_DIALECT_MOE_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::moe {
/// The unit attribute of the shared expert's ops that moe-decompose-layer
/// builds first (shared-first): on a GPU, convert-moe-to-gpu names their
/// kernels kSideStreamKernel and moe-gpu-side-stream runs them on a second
/// stream.
inline constexpr const char kSideStreamAttr[] = "moe.side_stream";
/// The kernel name of every kernel of an op marked kSideStreamAttr.
inline constexpr const char kSideStreamKernel[] = "moe_side_stream";

#define GEN_PASS_DECL
#include "moe/Dialect/MoE/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moe/Dialect/MoE/Transforms/Passes.h.inc"
} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_TRANSFORMS_PASSES_H
