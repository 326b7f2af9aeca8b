//===- Passes.h - moe conversion passes -------------------------*- C++ -*-===//
#ifndef MOE_CONVERSION_PASSES_H
#define MOE_CONVERSION_PASSES_H

#include "mlir/Pass/Pass.h"

#include <optional>
#include <string>

namespace mlir::moe {
/// The unit attribute that marks a math.exp whose result only feeds an
/// activation: moe-approximate-activation-exp may replace it by a
/// polynomial.
inline constexpr const char kApproximableExp[] = "moe.approximable";
/// The unit argument attribute that marks a GPU entry's CUstream argument
/// (moe-gpu-host-abi adds it, moe-gpu-launch-on-stream reads it).
inline constexpr const char kGpuStreamArg[] = "moe.gpu_stream";
/// The unit argument attribute that marks a GPU entry's buffer arguments
/// that it writes: its out-parameters and the workspace (moe-gpu-host-abi);
/// the others are inputs it only reads.
inline constexpr const char kGpuWrittenArg[] = "moe.gpu_written";
/// The runtime function that gives an entry's stream its side stream
/// (moe-gpu-side-stream calls it, moe-gpu-launch-on-stream finds the call).
inline constexpr const char kGpuSideStreamFunction[] = "moertGpuSideStream";
/// The unit attribute of a runtime call whose last operand is the stream to
/// work on (convert-moe-to-runtime{into-buffers} passes null; on a GPU,
/// moe-gpu-host-abi puts the entry's stream there).
inline constexpr const char kStreamOperand[] = "moe.stream_operand";

/// The problem with convert-moe-to-gpu's prefill-block (narrow or RxC),
/// prefill-stages, prefill-stage-depth and prefill-mma (mma-sync or
/// wgmma), naming the option; none if they can be built.
std::optional<std::string> checkGpuPrefillOptions(StringRef block, int64_t stages,
                                                  int64_t stageDepth, StringRef mma);

#define GEN_PASS_DECL
#include "moe/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

#endif // MOE_CONVERSION_PASSES_H
