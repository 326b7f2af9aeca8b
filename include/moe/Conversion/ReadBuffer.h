//===- ReadBuffer.h - a read-only buffer view of a tensor -------*- C++ -*-===//
#ifndef MOE_CONVERSION_READBUFFER_H
#define MOE_CONVERSION_READBUFFER_H

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace mlir::moe {
/// The buffer of a ranked tensor for a hand-written kernel that reads it:
/// any offset and outer strides, a unit innermost stride (which both the
/// CPU's vector loads and the GPU's fragment loads rely on).
inline Value readBuffer(OpBuilder &b, Location loc, Value tensor) {
  auto type = cast<RankedTensorType>(tensor.getType());
  SmallVector<int64_t> strides(type.getRank(), ShapedType::kDynamic);
  if (!strides.empty())
    strides.back() = 1;
  auto layout = StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic, strides);
  auto memrefType = MemRefType::get(type.getShape(), type.getElementType(), layout);
  return bufferization::ToBufferOp::create(b, loc, memrefType, tensor, /*read_only=*/true);
}
} // namespace mlir::moe

#endif // MOE_CONVERSION_READBUFFER_H
