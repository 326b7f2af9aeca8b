//===- GPUKernels.h - kernels the GPU lowerings share -----------*- C++ -*-===//
#ifndef MOE_CONVERSION_MOETOGPU_GPUKERNELS_H
#define MOE_CONVERSION_MOETOGPU_GPUKERNELS_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

namespace mlir::moe {
/// Where `marked` (the op being lowered carries kSideStreamAttr), names
/// kSideStreamKernel every kernel launched by the ops its lowering built:
/// those after `before` (null: from the start of `end`'s block) up to `end`.
void nameSideStreamKernels(bool marked, Operation *before, Operation *end);

/// Whether the tensor-core GEMM takes N = `cols` and K = `depth`.
bool denseTensorCoreGemmApplies(int64_t cols, int64_t depth);

/// out[r, n] = sum_k a[r, k] * w[n, k] for r < rows: bf16 `a` [rows, K] and
/// `w` [N, K] on tensor cores, into f32 or bf16 `out` [rows, N] (the
/// grouped GEMM kernel without experts; its decode and prefill forms).
/// With `splitDepth`, where its decode form runs few blocks, that form
/// splits the depth among S blocks and writes their f32 partial sums to
/// the buffer it returns, [S, denseDecodeMaxRows(), N], instead of `out`
/// (for rows <= denseDecodeMaxRows(): the caller adds them in order of s);
/// null where it does not split.
Value buildDenseTensorCoreGemm(OpBuilder &b, Location loc, Value a, Value w, Value out, Value rows,
                               int64_t cols, int64_t depth, bool splitDepth = false);

/// The most rows for which the dense GEMM takes its decode form.
int64_t denseDecodeMaxRows();

/// bf16 moe.route -> the logits GEMM and one kernel (RouteGPU.cpp).
void populateRouteToGPUPatterns(RewritePatternSet &patterns);

/// moe.dispatch (padded layout) -> four kernels (DispatchGPU.cpp).
void populateDispatchToGPUPatterns(RewritePatternSet &patterns);

/// moe.activation and moe.combine -> a kernel each, 16 bytes a thread at a
/// time (ElementwiseGPU.cpp).
void populateElementwiseToGPUPatterns(RewritePatternSet &patterns);

/// silu(gate) * up, and gpt-oss's clamped form, of f32 scalars.
Value swiglu(OpBuilder &b, Location loc, Value gate, Value up);
Value clampedSwiglu(OpBuilder &b, Location loc, Value gate, Value up, float alpha, float limit);

/// The kernel of `op` (moe.activation) from `input` [rows, 2I] into `out`
/// [rows, I] (memrefs). With `offsets` (a grouped GEMM's [E + 1], whose
/// offsets[E] rows are used of a worst case `rows`), a fixed grid strides
/// over the rows used only, read on the device.
void buildActivationKernel(OpBuilder &b, Location loc, ActivationOp op, Value input, Value out,
                           Value rows, Value offsets = nullptr, int64_t experts = 0);
/// rows x cols bf16 `input` quantized per `group` of each row: `codes`
/// [rows, cols] E4M3 (i8) of x / scale, rounded to nearest and saturated,
/// and `scales` [rows, cols / group] (f32) amax / 448 (0 for a group of
/// zeros, whose codes are 0). A thread per 8 elements, the group's amax
/// by shuffles among its cols / 8 threads (`group` a multiple of 128 at
/// most 256, dividing cols). With `offsets` (a grouped GEMM's [E + 1] of a
/// worst case `rows`), only the first offsets[E] rows, read on the device.
void buildRowQuantizeKernel(OpBuilder &b, Location loc, Value input, Value codes, Value scales,
                            Value rows, int64_t cols, int64_t group, Value offsets = nullptr,
                            int64_t experts = 0);
/// rows x cols E4M3 `codes` (i8) with f32 `scales` per `group` of a row
/// into bf16 `out`: bf16(f32(code) * scale), as the decode form's loads
/// round them (a thread per 8). With `offsets`, only the first offsets[E]
/// rows (read on the device) of a worst case `rows`.
void buildRowDequantizeKernel(OpBuilder &b, Location loc, Value codes, Value scales, Value out,
                              Value rows, int64_t cols, int64_t group, Value offsets = nullptr,
                              int64_t experts = 0);
/// The exact f32 values of the E4M3 (e4m3fn) `codes` (a vector of i8):
/// each code's exponent and mantissa moved into an f32's and the result
/// scaled by 2^120 (the difference of the biases; E4M3's subnormals become
/// f32 subnormals first, so the kernel must keep f32 denormals), 0x7F and
/// 0xFF NaN.
Value decodeE4m3(OpBuilder &b, Location loc, Value codes);
} // namespace mlir::moe

#endif // MOE_CONVERSION_MOETOGPU_GPUKERNELS_H
