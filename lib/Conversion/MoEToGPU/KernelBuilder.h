//===- KernelBuilder.h - small helpers for hand-built kernels ---*- C++ -*-===//
//
// The constants, loads, stores, branches and loops the GPU kernels of this
// directory build op by op; each op goes where `b` inserts.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_CONVERSION_MOETOGPU_KERNELBUILDER_H
#define MOE_CONVERSION_MOETOGPU_KERNELBUILDER_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::moe {
struct KernelBuilder {
  OpBuilder &b;
  Location loc;

  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value i32(int64_t v) { return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v)); }
  Value f32(double v) { return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v)); }
  Value load(Value buffer, ValueRange at) { return memref::LoadOp::create(b, loc, buffer, at); }
  void store(Value v, Value buffer, ValueRange at) { memref::StoreOp::create(b, loc, v, buffer, at); }
  Value cmp(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, loc, p, x, y);
  }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value toIndex(Value v) { return arith::IndexCastOp::create(b, loc, b.getIndexType(), v); }
  Value toI32(Value v) { return arith::IndexCastOp::create(b, loc, b.getI32Type(), v); }

  void ifThen(Value cond, function_ref<void()> then) {
    auto op = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(op.thenBlock());
    then();
  }

  /// A loop over [lb, ub) by `step` carrying `init`; `body` returns the
  /// next values.
  SmallVector<Value> fold(Value lb, Value ub, Value step, ValueRange init,
                          function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    auto loop = scf::ForOp::create(b, loc, lb, ub, step, init,
                                   [&](OpBuilder &nb, Location, Value i, ValueRange acc) {
                                     OpBuilder::InsertionGuard guard(b);
                                     b.setInsertionPoint(nb.getInsertionBlock(),
                                                         nb.getInsertionPoint());
                                     scf::YieldOp::create(b, loc, body(i, acc));
                                   });
    return SmallVector<Value>(loop.getResults());
  }

  void forEach(Value lb, Value ub, Value step, function_ref<void(Value)> body) {
    fold(lb, ub, step, ValueRange{}, [&](Value i, ValueRange) {
      body(i);
      return SmallVector<Value>{};
    });
  }

  /// values[0..n) (i32 in workgroup memory) becomes its inclusive scan
  /// (Hillis-Steele): thread `i` owns values[i] where `active`; every
  /// thread of the block takes part in the barriers.
  void inclusiveScan(Value values, Value i, Value active, int64_t n) {
    for (int64_t d = 1; d < n; d *= 2) {
      Value take = arith::AndIOp::create(b, loc, active, cmp(arith::CmpIPredicate::uge, i, idx(d)));
      Value from =
          arith::SelectOp::create(b, loc, take, arith::SubIOp::create(b, loc, i, idx(d)), idx(0));
      Value addend = arith::SelectOp::create(b, loc, take, load(values, {from}), i32(0));
      gpu::BarrierOp::create(b, loc);
      ifThen(active, [&] { store(add(load(values, {i}), addend), values, {i}); });
      gpu::BarrierOp::create(b, loc);
    }
  }
};
} // namespace mlir::moe

#endif // MOE_CONVERSION_MOETOGPU_KERNELBUILDER_H
