//===- Buffers.cpp - memref islands inside tensor programs ----------------===//
#include "CPUPatterns.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"

#include <functional>
#include <limits>

using namespace mlir;
using namespace mlir::moe;

Value cpu::allocBuffer(OpBuilder &b, Location loc, RankedTensorType type,
                       ValueRange dynamicSizes) {
  auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
  // 64-byte alignment: whole cache lines for the vector loads.
  return memref::AllocOp::create(b, loc, memrefType, dynamicSizes,
                                 b.getI64IntegerAttr(64));
}

Value cpu::toTensor(OpBuilder &b, Location loc, Value buffer, Type tensorType) {
  return bufferization::ToTensorOp::create(b, loc, tensorType, buffer,
                                           /*restrict=*/true, /*writable=*/true);
}

Value cpu::constIndex(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

Value cpu::loadIndex(OpBuilder &b, Location loc, Value buffer,
                     ValueRange indices) {
  Value v = memref::LoadOp::create(b, loc, buffer, indices);
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), v);
}

void cpu::forLoop(OpBuilder &b, Location loc, Value lb, Value ub, Value step,
                  function_ref<void(Value)> body) {
  scf::ForOp::create(b, loc, lb, ub, step, ValueRange{},
                     [&](OpBuilder &nb, Location, Value iv, ValueRange) {
                       OpBuilder::InsertionGuard guard(b);
                       b.setInsertionPoint(nb.getInsertionBlock(),
                                           nb.getInsertionPoint());
                       body(iv);
                       scf::YieldOp::create(b, loc);
                     });
}

Value cpu::widenToF32(OpBuilder &b, Location loc, Value v) {
  auto type = cast<VectorType>(v.getType());
  if (type.getElementType().isF32())
    return v;
  // bf16 -> f32 is exact: the 16 bits become the high half of the f32.
  auto i16 = type.clone(b.getI16Type());
  auto i32 = type.clone(b.getI32Type());
  Value bits = vector::BitCastOp::create(b, loc, i16, v);
  Value wide = arith::ExtUIOp::create(b, loc, i32, bits);
  Value shift = arith::ConstantOp::create(
      b, loc, i32, DenseElementsAttr::get(i32, b.getI32IntegerAttr(16)));
  Value high = arith::ShLIOp::create(b, loc, wide, shift);
  return vector::BitCastOp::create(b, loc, type.clone(b.getF32Type()), high);
}

/// FP8 E4M3 codes (i8, a scalar or a vector) as f32 times 2^-8: the sign
/// goes to bit 15 of an i16 and the other 7 bits to its bits 7..13, which
/// makes an f16 of the same value times 2^-8 (normal and subnormal codes
/// alike: f16's exponent bias is 8 more than E4M3's), widened to f32. Three
/// integer operations and one conversion per vector; NaN codes (0x7F, 0xFF)
/// decode to +-480 (not valid weights, see moe.grouped_matmul).
Value cpu::e4m3TimesTwoToMinus8(OpBuilder &b, Location loc, Value codes) {
  auto like = [&](Type element) -> Type {
    if (auto vector = dyn_cast<VectorType>(codes.getType()))
      return vector.clone(element);
    return element;
  };
  auto constant = [&](Type type, int64_t v) -> Value {
    Attribute value = b.getIntegerAttr(getElementTypeOrSelf(type), v);
    if (auto vector = dyn_cast<VectorType>(type))
      value = DenseElementsAttr::get(vector, value);
    return arith::ConstantOp::create(b, loc, cast<TypedAttr>(value));
  };
  Type i16 = like(b.getI16Type());
  Value wide = arith::ExtSIOp::create(b, loc, i16, codes);
  Value seven = constant(i16, 7);
  Value shifted = arith::ShLIOp::create(b, loc, wide, seven);
  Value keep = constant(i16, 0xBFFF - 0x10000);
  Value bits = arith::AndIOp::create(b, loc, shifted, keep);
  Value half = arith::BitcastOp::create(b, loc, like(b.getF16Type()), bits);
  return arith::ExtFOp::create(b, loc, like(b.getF32Type()), half);
}

namespace {
/// A scale times 2^8, for values decoded by e4m3TimesTwoToMinus8.
Value timesTwoTo8(OpBuilder &b, Location loc, Value scale) {
  Value twoTo8 = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(256.0f));
  return arith::MulFOp::create(b, loc, scale, twoTo8);
}
} // namespace

Value cpu::weightBlockScale(OpBuilder &b, Location loc, const GemmBuffers &ops,
                           Value expert, Value col, Value k) {
  Value row = arith::DivUIOp::create(b, loc, col, cpu::constIndex(b, loc, ops.blockRows));
  Value block = arith::DivUIOp::create(b, loc, k, cpu::constIndex(b, loc, ops.blockCols));
  Value scale = memref::LoadOp::create(b, loc, ops.wScales, ValueRange{expert, row, block});
  return timesTwoTo8(b, loc, scale);
}

Value cpu::loadWeightRow(OpBuilder &b, Location loc, const GemmBuffers &ops,
                         int64_t lanes, Value expert, Value col, Value k, Value mask) {
  Type element = cast<MemRefType>(ops.w.getType()).getElementType();
  auto vectorType = VectorType::get({lanes}, element);
  SmallVector<Value, 3> at = {expert, col, k};
  Value v;
  if (mask) {
    Value zero = arith::ConstantOp::create(
        b, loc, vectorType, DenseElementsAttr::get(vectorType, b.getZeroAttr(element)));
    v = vector::MaskedLoadOp::create(b, loc, vectorType, ops.w, at, mask, zero);
  } else {
    v = vector::LoadOp::create(b, loc, vectorType, ops.w, at);
  }
  if (!ops.wScales)
    return widenToF32(b, loc, v);
  // The vector lies in one scale block: blockCols is a multiple of lanes.
  Value scale = weightBlockScale(b, loc, ops, expert, col, k);
  Value decoded = e4m3TimesTwoToMinus8(b, loc, v);
  Value scales = vector::BroadcastOp::create(b, loc, decoded.getType(), scale);
  return arith::MulFOp::create(b, loc, decoded, scales);
}

Value cpu::loadWeight(OpBuilder &b, Location loc, const GemmBuffers &ops,
                      Value expert, Value col, Value k) {
  Value v = memref::LoadOp::create(b, loc, ops.w, ValueRange{expert, col, k});
  if (ops.wScales) {
    Value scale = weightBlockScale(b, loc, ops, expert, col, k);
    return arith::MulFOp::create(b, loc, e4m3TimesTwoToMinus8(b, loc, v), scale);
  }
  if (v.getType().isF32())
    return v;
  return arith::ExtFOp::create(b, loc, b.getF32Type(), v);
}

void cpu::widenRow(OpBuilder &b, Location loc, Value narrow, Value wide, Value row,
                   int64_t lanes) {
  auto type = cast<MemRefType>(narrow.getType());
  const int64_t depth = type.getDimSize(1);
  auto vectorType = VectorType::get({lanes}, type.getElementType());
  forLoop(b, loc, constIndex(b, loc, 0), constIndex(b, loc, depth / lanes * lanes),
          constIndex(b, loc, lanes), [&](Value k) {
            Value v = vector::LoadOp::create(b, loc, vectorType, narrow, ValueRange{row, k});
            vector::StoreOp::create(b, loc, widenToF32(b, loc, v), wide, ValueRange{row, k});
          });
  forLoop(b, loc, constIndex(b, loc, depth / lanes * lanes), constIndex(b, loc, depth),
          constIndex(b, loc, 1), [&](Value k) {
            Value v = memref::LoadOp::create(b, loc, narrow, ValueRange{row, k});
            memref::StoreOp::create(b, loc, arith::ExtFOp::create(b, loc, b.getF32Type(), v),
                                    wide, ValueRange{row, k});
          });
}

void cpu::decodeFp8Row(OpBuilder &b, Location loc, Value codes, Value scales,
                       int64_t group, Value wide, Value row, int64_t lanes) {
  const int64_t depth = cast<MemRefType>(codes.getType()).getDimSize(1);
  auto codesType = VectorType::get({lanes}, b.getI8Type());
  auto f32Vector = VectorType::get({lanes}, b.getF32Type());
  forLoop(b, loc, constIndex(b, loc, 0), constIndex(b, loc, depth), constIndex(b, loc, lanes),
          [&](Value k) {
            Value v = vector::LoadOp::create(b, loc, codesType, codes, ValueRange{row, k});
            Value g = arith::DivUIOp::create(b, loc, k, constIndex(b, loc, group));
            Value scale = memref::LoadOp::create(b, loc, scales, ValueRange{row, g});
            Value splat =
                vector::BroadcastOp::create(b, loc, f32Vector, timesTwoTo8(b, loc, scale));
            Value decoded = e4m3TimesTwoToMinus8(b, loc, v);
            Value value = arith::MulFOp::create(b, loc, decoded, splat);
            // A NaN activation travels as a NaN code (docs/FP8Dispatch.md)
            // and stays NaN, as when the receiver dequantizes.
            Value low7 = arith::ConstantOp::create(
                b, loc, DenseElementsAttr::get(codesType, b.getI8IntegerAttr(0x7F)));
            Value magnitude = arith::AndIOp::create(b, loc, v, low7);
            Value isNaN = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, magnitude, low7);
            Value nan = arith::ConstantOp::create(
                b, loc,
                DenseElementsAttr::get(f32Vector, b.getF32FloatAttr(
                                                      std::numeric_limits<float>::quiet_NaN())));
            value = arith::SelectOp::create(b, loc, isNaN, nan, value);
            vector::StoreOp::create(b, loc, value, wide, ValueRange{row, k});
          });
}

void cpu::fillInLine(OpBuilder &b, Location loc, Value view, Value value) {
  int64_t rank = cast<MemRefType>(view.getType()).getRank();
  SmallVector<Value> sizes, indices;
  for (int64_t dim = 0; dim < rank; ++dim)
    sizes.push_back(memref::DimOp::create(b, loc, view, dim));
  std::function<void(int64_t)> nest = [&](int64_t dim) {
    if (dim == rank) {
      memref::StoreOp::create(b, loc, value, view, indices);
      return;
    }
    forLoop(b, loc, constIndex(b, loc, 0), sizes[dim], constIndex(b, loc, 1), [&](Value iv) {
      indices.push_back(iv);
      nest(dim + 1);
      indices.pop_back();
    });
  };
  nest(0);
}
