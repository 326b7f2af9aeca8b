//===- Buffers.cpp - memref islands inside tensor programs ----------------===//
#include "CPUPatterns.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinTypes.h"

#include <functional>

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
