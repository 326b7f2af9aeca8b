//===- Passes.h - moe conversion passes -------------------------*- C++ -*-===//
#ifndef MOE_CONVERSION_PASSES_H
#define MOE_CONVERSION_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::moe {
/// The unit attribute that marks a math.exp whose result only feeds an
/// activation: moe-approximate-activation-exp may replace it by a
/// polynomial.
inline constexpr const char kApproximableExp[] = "moe.approximable";
/// The unit argument attribute that marks a GPU entry's CUstream argument
/// (moe-gpu-host-abi adds it, moe-gpu-launch-on-stream reads it).
inline constexpr const char kGpuStreamArg[] = "moe.gpu_stream";

#define GEN_PASS_DECL
#include "moe/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

#endif // MOE_CONVERSION_PASSES_H
