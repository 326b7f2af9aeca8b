//===- CPUPatterns.h - the CPU code-generation strategy of moe ops -*- C++ -*-===//
#ifndef MOE_CONVERSION_MOETOCPU_CPUPATTERNS_H
#define MOE_CONVERSION_MOETOCPU_CPUPATTERNS_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::moe::cpu {

/// Tile sizes of the strategy (see `convert-moe-to-cpu`).
struct CpuCodegenOptions {
  int64_t vectorWidth = 8;
  int64_t registerRows = 3;
  int64_t registerCols = 4;
  int64_t columnBlock = 64;
  /// Bytes of the weight rows one register tile pass keeps in L1.
  int64_t l1PanelBytes = 16 * 1024;
};

/// Operands of a grouped GEMM on buffers:
/// `out[r, n] = sum_k a[r, k] * w[e, n, k]` for the rows `r` of expert `e`.
struct GemmBuffers {
  Value a;          ///< [R, K], f32 or bf16, unit innermost stride
  Value w;          ///< [E, N, K], f32 or bf16, unit innermost stride
  Value out;        ///< [R, N], f32 or bf16, written
  Value rowBegin;   ///< [E] index: first row of each expert
  Value rowEnd;     ///< [E] index: one past its last row
};

/// Emits the tiled, vectorized, threaded GEMM (an `scf.forall` over work
/// items of one column block of one expert). Rows outside every expert's
/// [rowBegin, rowEnd) are not written.
void buildGroupedGemm(OpBuilder &b, Location loc, const GemmBuffers &operands,
                      const CpuCodegenOptions &options);

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

/// A read-only buffer of `tensor`: any offset and outer strides, unit
/// innermost stride (what vector loads need).
Value readBuffer(OpBuilder &b, Location loc, Value tensor);

/// A new buffer with the shape of `type` (dynamic extents from `dynamicSizes`).
Value allocBuffer(OpBuilder &b, Location loc, RankedTensorType type,
                  ValueRange dynamicSizes);

/// The tensor of a buffer that this island allocated and filled.
Value toTensor(OpBuilder &b, Location loc, Value buffer, Type tensorType);

/// Scalar helpers.
Value constIndex(OpBuilder &b, Location loc, int64_t v);
Value loadIndex(OpBuilder &b, Location loc, Value buffer, ValueRange indices);

} // namespace mlir::moe::cpu

#endif // MOE_CONVERSION_MOETOCPU_CPUPATTERNS_H
