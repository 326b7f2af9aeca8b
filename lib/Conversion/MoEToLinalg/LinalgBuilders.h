//===- LinalgBuilders.h - small builders for linalg.generic on tensors ----===//
#ifndef MOE_CONVERSION_MOETOLINALG_LINALGBUILDERS_H
#define MOE_CONVERSION_MOETOLINALG_LINALGBUILDERS_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::moe::lowering {

/// Body of a generic: the builder, the loop indices and the block arguments.
using BodyFn = function_ref<Value(OpBuilder &, Location, ValueRange indices,
                                  ValueRange args)>;

/// Builds a linalg.generic with one output. `maps` are written as lists of
/// loop dimensions per operand (inputs, then the output), each a projected
/// permutation. Loops listed in `reductions` are reductions. The body returns
/// the value to yield.
Value buildGeneric(ImplicitLocOpBuilder &b, ValueRange inputs, Value init,
                   ArrayRef<SmallVector<unsigned>> dims, unsigned numLoops,
                   ArrayRef<unsigned> reductions, BodyFn body);

/// A tensor of `sizes` filled with `value` (an attribute of `elementType`).
Value buildFilled(ImplicitLocOpBuilder &b, ArrayRef<OpFoldResult> sizes,
                  TypedAttr value);

/// An uninitialized tensor of `sizes`.
Value buildEmpty(ImplicitLocOpBuilder &b, ArrayRef<OpFoldResult> sizes,
                 Type elementType);

/// Rounds an f32 tensor to `elementType` (no-op for f32).
Value castElements(ImplicitLocOpBuilder &b, Value tensor, Type elementType);

/// Widens a scalar to f32 (no-op for f32).
Value toF32(OpBuilder &b, Location loc, Value scalar);

/// The f32 value of an FP8 E4M3 (e4m3fn) code held in an i8: sign, 4
/// exponent bits (bias 7, 0 = subnormal m * 2^-9), 3 mantissa bits;
/// S.1111.111 is NaN and there is no infinity. Integer arithmetic only, so
/// it lowers anywhere (LLVM has no FP8 type).
Value decodeE4M3(OpBuilder &b, Location loc, Value code);

/// True when `other` (at index `io`) comes before `self` (at `is`) in the
/// routing order, a strict total order on (score, index): a higher score
/// first, equal scores by the lower index, NaN below every number (-inf
/// included), NaNs among themselves by index. Shared by both lowerings of
/// moe.route, so they pick the same experts.
Value beats(OpBuilder &b, Location loc, Value other, Value self, Value io, Value is);

/// The entry e of [begin, end) (its value `valueAt(e)`) that is best in the
/// `beats` order among those that (prevValue, prevIndex) beats, or the best
/// of all with `firstPick`: (value, index). There is always one when the
/// caller asks for at most as many picks as the range has entries. Top-k by
/// selection, shared by the CPU and GPU routing.
std::pair<Value, Value> bestBelow(OpBuilder &b, Location loc, Value begin, Value end,
                                  Value firstPick, Value prevValue, Value prevIndex,
                                  function_ref<Value(OpBuilder &, Location, Value)> valueAt);

/// `size * factor` as an OpFoldResult.
OpFoldResult mulSize(ImplicitLocOpBuilder &b, OpFoldResult size,
                     int64_t factor);

/// Reshapes `t` by `reassociation` to `shape` (dynamic extents from `sizes`).
Value expand(ImplicitLocOpBuilder &b, Value t, ArrayRef<OpFoldResult> sizes,
             ArrayRef<ReassociationIndices> reassociation);
Value collapse(ImplicitLocOpBuilder &b, Value t,
               ArrayRef<ReassociationIndices> reassociation);

} // namespace mlir::moe::lowering

#endif // MOE_CONVERSION_MOETOLINALG_LINALGBUILDERS_H
