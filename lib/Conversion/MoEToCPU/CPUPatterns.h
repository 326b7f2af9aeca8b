//===- CPUPatterns.h - the CPU code-generation strategy of moe ops -*- C++ -*-===//
#ifndef MOE_CONVERSION_MOETOCPU_CPUPATTERNS_H
#define MOE_CONVERSION_MOETOCPU_CPUPATTERNS_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/PatternMatch.h"
#include "moe/Conversion/ReadBuffer.h"

namespace mlir::moe::cpu {

/// Tile sizes of the strategy (see `convert-moe-to-cpu`).
struct CpuCodegenOptions {
  int64_t vectorWidth = 8;
  int64_t registerRows = 3;
  int64_t registerCols = 4;
  /// Independent vector accumulators of the decode dot product (a weight
  /// row at a time): four keep enough FMAs in flight to follow one
  /// sequential stream (f32 Qwen3-like T = 1, one core: 32 GB/s against
  /// 25 GB/s for 8 weight rows streamed side by side).
  int64_t decodeAccumulators = 4;
  /// bf16 rows times bf16 weights (and FP8 weights in the packed GEMM) as
  /// pairs of bf16 products summed into f32 (AVX512-BF16's vdpbf16ps, 32
  /// products per instruction against 16 for f32 FMAs); needs vectorWidth 16.
  bool bf16Dot = false;
  int64_t columnBlock = 64;
  /// Bytes of the weight rows one register tile pass keeps in L1.
  int64_t l1PanelBytes = 16 * 1024;
  /// Experts with at least this many rows take the packed path (0: never).
  int64_t packedMinRows = 24;
  /// Its register tile: packedTileRows rows by a panel of 2 x vectorWidth
  /// columns (2 x packedTileRows accumulators); a work item is a block of up
  /// to packedBlockRows rows by packedGroupPanels panels.
  int64_t packedTileRows = 6;
  int64_t packedGroupPanels = 4;
  int64_t packedBlockRows = 192;
  /// Bytes of one packed weight panel ([depth][panel] f32, kept in L2); a
  /// deeper f32 GEMM is split into depth blocks that add to the output.
  int64_t packedPanelBytes = 256 * 1024;
  /// Thread slots of the packed GEMM (runs of work items with their own
  /// panel scratch): at most this many threads share its work.
  int64_t packedSlots = 64;
};

/// Operands of a grouped GEMM on buffers:
/// `out[r, n] = sum_k a[r, k] * w[e, n, k]` for the rows `r` of expert `e`.
struct GemmBuffers {
  Value a;          ///< [R, K], f32, bf16 or FP8 codes, unit innermost stride
  Value w;          ///< [E, N, K], f32, bf16 or FP8 codes, unit innermost stride
  /// FP8 weights (i8 E4M3 codes): [E, ceil(N / blockRows), ceil(K /
  /// blockCols)] f32 scales; blockCols is a multiple of the vector width.
  Value wScales;
  int64_t blockRows = 0, blockCols = 0;
  /// FP8 rows (i8 E4M3 codes in `a`): [R, K / rowGroup] f32 scales, one per
  /// rowGroup codes (a multiple of the vector width).
  Value aScales;
  int64_t rowGroup = 0;
  Value out;        ///< [R, N], f32 or bf16, written
  Value rowBegin;   ///< [E] index: first row of each expert
  Value rowEnd;     ///< [E] index: one past its last row

  /// The static sizes of the weights: E, N and K.
  int64_t experts() const { return weightSize(0); }
  int64_t cols() const { return weightSize(1); }
  int64_t depth() const { return weightSize(2); }

private:
  int64_t weightSize(unsigned dim) const {
    return cast<MemRefType>(w.getType()).getDimSize(dim);
  }
};

/// Emits the tiled, vectorized, threaded GEMM (an `scf.forall` over work
/// items of one column block of one expert). Rows outside every expert's
/// [rowBegin, rowEnd) are not written.
void buildGroupedGemm(OpBuilder &b, Location loc, const GemmBuffers &operands,
                      const CpuCodegenOptions &options);

/// The packed path for experts with many rows (see PackedGemmCPU.cpp):
/// whether it applies to these operands, its GEMM, and whether the expert
/// rows [begin, end) take it.
bool usesPackedGemm(const GemmBuffers &operands, const CpuCodegenOptions &options);
/// Whether the packed GEMM multiplies bf16 pairs (options.bf16Dot): bf16
/// rows with bf16 weights, or with FP8 weights whose scale blocks hold whole
/// pairs of depths and whole panels of columns (their codes become bf16
/// exactly, and each scale block's sum is scaled once). Such rows are read
/// as they are, not widened.
bool packedGemmMultipliesBf16Pairs(const GemmBuffers &operands,
                                   const CpuCodegenOptions &options);
void buildPackedGemm(OpBuilder &b, Location loc, const GemmBuffers &operands,
                     const CpuCodegenOptions &options);
Value isPackedExpert(OpBuilder &b, Location loc, const GemmBuffers &operands,
                     const CpuCodegenOptions &options, Value begin, Value end);

void populateCpuGroupedMatmulPatterns(RewritePatternSet &patterns,
                                      const CpuCodegenOptions &options);
void populateCpuRoutePatterns(RewritePatternSet &patterns,
                              const CpuCodegenOptions &options);
void populateCpuDispatchPatterns(RewritePatternSet &patterns,
                                 const CpuCodegenOptions &options);

//===----------------------------------------------------------------------===//
// Memref islands: each lowering reads its tensor operands as buffers, fills
// new buffers with loops and hands them back as tensors.
//===----------------------------------------------------------------------===//

using moe::readBuffer;

/// A new buffer with the shape of `type` (dynamic extents from `dynamicSizes`).
Value allocBuffer(OpBuilder &b, Location loc, RankedTensorType type,
                  ValueRange dynamicSizes);

/// The tensor of a buffer that this island allocated and filled.
Value toTensor(OpBuilder &b, Location loc, Value buffer, Type tensorType);

/// Scalar helpers.
Value constIndex(OpBuilder &b, Location loc, int64_t v);
Value loadIndex(OpBuilder &b, Location loc, Value buffer, ValueRange indices);
/// An scf.for without results whose body `body(iv)` builds at `b`.
void forLoop(OpBuilder &b, Location loc, Value lb, Value ub, Value step,
             function_ref<void(Value)> body);
/// A bf16 vector as f32 (exact: a shift of the 16 bits), an f32 one as is.
Value widenToF32(OpBuilder &b, Location loc, Value vector);
/// FP8 E4M3 codes (i8, a scalar or a vector) as f32 times 2^-8 (exact:
/// the codes' bits moved into an f16). NaN codes decode to +-480 (not valid
/// weights, see moe.grouped_matmul).
Value e4m3TimesTwoToMinus8(OpBuilder &b, Location loc, Value codes);
/// The scale of FP8 weight [expert, col, k] times 2^8, to go with
/// e4m3TimesTwoToMinus8.
Value weightBlockScale(OpBuilder &b, Location loc, const GemmBuffers &ops, Value expert,
                       Value col, Value k);
/// wide[row, :] = f32(narrow[row, :]) for a bf16 `narrow` [R, K] (static K).
void widenRow(OpBuilder &b, Location loc, Value narrow, Value wide, Value row,
              int64_t lanes);
/// wide[row, :] = e4m3(codes[row, :]) * its groups' scales (`group` codes
/// per scale, a multiple of `lanes`); NaN codes give NaN.
void decodeFp8Row(OpBuilder &b, Location loc, Value codes, Value scales, int64_t group,
                  Value wide, Value row, int64_t lanes);
/// `lanes` weights `w[expert, col, k...]` as f32 (`mask`, optional, limits
/// the read at the end of a row); FP8 codes are decoded and scaled.
Value loadWeightRow(OpBuilder &b, Location loc, const GemmBuffers &ops,
                    int64_t lanes, Value expert, Value col, Value k, Value mask);
/// The weight `w[expert, col, k]` as f32.
Value loadWeight(OpBuilder &b, Location loc, const GemmBuffers &ops, Value expert,
                 Value col, Value k);
/// Stores `value` into every element of `view` with scf.for loops on the
/// calling thread. For the few padding rows of one expert inside a loop over
/// experts, where a linalg.fill would start a thread team per expert.
void fillInLine(OpBuilder &b, Location loc, Value view, Value value);

} // namespace mlir::moe::cpu

#endif // MOE_CONVERSION_MOETOCPU_CPUPATTERNS_H
