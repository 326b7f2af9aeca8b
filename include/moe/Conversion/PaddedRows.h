//===- PaddedRows.h - rows of the dispatch's padded layout ------*- C++ -*-===//
#ifndef MOE_CONVERSION_PADDEDROWS_H
#define MOE_CONVERSION_PADDEDROWS_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Builders.h"

namespace mlir::moe {
/// `pairs + min(experts, pairs) * (tile - 1)` (index): the rows of a
/// dispatch that pads each expert's rows to `tile` (DispatchOp::paddedRows).
inline Value paddedRows(OpBuilder &b, Location loc, Value pairs, int64_t experts, int64_t tile) {
  if (tile == 1)
    return pairs;
  if (auto known = getConstantIntValue(pairs))
    return arith::ConstantIndexOp::create(
        b, loc, *known + std::min(experts, *known) * (tile - 1));
  Value touched = arith::MinUIOp::create(b, loc, pairs,
                                         arith::ConstantIndexOp::create(b, loc, experts));
  Value padding = arith::MulIOp::create(b, loc, touched,
                                        arith::ConstantIndexOp::create(b, loc, tile - 1));
  return arith::AddIOp::create(b, loc, pairs, padding);
}
} // namespace mlir::moe

#endif // MOE_CONVERSION_PADDEDROWS_H
