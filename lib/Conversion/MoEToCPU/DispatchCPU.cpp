//===- DispatchCPU.cpp - moe.dispatch as a counting sort by a scan --------===//
//
// O(T*k + E) bookkeeping, then an O(T*k*H) copy of the rows on threads:
//   counts[e]      one pass over the ids
//   offsets[e]     exclusive scan of the counts padded to row_tile (or e*C)
//   slot[t, j]     a second pass: the next free row of the choice's expert,
//                  so rows keep (token, choice) order within an expert
//   rows           scf.forall over choices: copy x[t] to row slot[t, j];
//                  rows no choice took are zero with row_expert = -1.
// The layout is the one `convert-moe-to-linalg` produces (same slots, rows
// and offsets), at linear cost.
//===----------------------------------------------------------------------===//
#include "CPUPatterns.h"
#include "moe/Conversion/PaddedRows.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::cpu;

namespace {
/// scf.for without results whose body is `body(iv)`.
void forEach(OpBuilder &b, Location loc, Value lb, Value ub, Value step,
             function_ref<void(OpBuilder &, Location, Value)> body) {
  scf::ForOp::create(b, loc, lb, ub, step, ValueRange{},
                     [&](OpBuilder &nb, Location nl, Value iv, ValueRange) {
                       body(nb, nl, iv);
                       scf::YieldOp::create(nb, nl);
                     });
}


/// Fills rows [from, to) of a [R, H] buffer with `value`: on threads, or on
/// the calling thread when `inLine` (a few rows, inside a loop).
void fillRows(OpBuilder &b, Location loc, Value buffer, Value from, Value to,
              Value value, bool inLine = false) {
  auto type = cast<MemRefType>(buffer.getType());
  SmallVector<OpFoldResult> offsets = {from}, sizes = {b.getIndexAttr(1)},
                            strides = {b.getIndexAttr(1)};
  Value count = arith::SubIOp::create(b, loc, to, from);
  sizes[0] = count;
  if (type.getRank() == 2) {
    offsets.push_back(b.getIndexAttr(0));
    sizes.push_back(memref::getMixedSize(b, loc, buffer, 1));
    strides.push_back(b.getIndexAttr(1));
  }
  Value view = memref::SubViewOp::create(b, loc, buffer, offsets, sizes, strides);
  if (inLine)
    fillInLine(b, loc, view, value);
  else
    linalg::FillOp::create(b, loc, value, view);
}

struct DispatchToCPU : OpRewritePattern<DispatchOp> {
  DispatchToCPU(MLIRContext *ctx, const CpuCodegenOptions &options)
      : OpRewritePattern(ctx), options(options) {}

  LogicalResult matchAndRewrite(DispatchOp op,
                                PatternRewriter &rewriter) const override {
    auto xType = op.getX().getType();
    if (ShapedType::isDynamic(xType.getDimSize(1)))
      return rewriter.notifyMatchFailure(op, "needs a static hidden size");
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    const int64_t experts = op.getNumExperts();
    const int64_t topK = op.getExpertIds().getType().getDimSize(1);
    const int64_t tile = op.getRowTileOrOne();
    const int64_t hidden = xType.getDimSize(1);
    Value zero = constIndex(b, loc, 0), one = constIndex(b, loc, 1);
    Value k = constIndex(b, loc, topK), e = constIndex(b, loc, experts);
    Value tokens = tensor::DimOp::create(b, loc, op.getX(), 0);
    Value pairs = arith::MulIOp::create(b, loc, tokens, k);
    std::optional<uint64_t> capacity = op.getCapacity();
    if (capacity && xType.isDynamicDim(0)) {
      Value fits = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ule, tokens,
                                         constIndex(b, loc, int64_t(*capacity)));
      cf::AssertOp::create(b, loc, fits,
                           "moe.dispatch: more tokens than the decode layout's "
                           "capacity of " + std::to_string(*capacity) + " per expert");
    }
    Value rows = capacity ? constIndex(b, loc, experts * int64_t(*capacity))
                          : paddedRows(b, loc, pairs, experts, tile);

    Value x = readBuffer(b, loc, op.getX());
    Value ids = readBuffer(b, loc, op.getExpertIds());
    Type i32Type = b.getI32Type();
    auto rowsType = RankedTensorType::get({ShapedType::kDynamic, hidden},
                                          xType.getElementType());
    auto rowIdsType = RankedTensorType::get({ShapedType::kDynamic}, i32Type);
    auto slotType = RankedTensorType::get({ShapedType::kDynamic, topK}, i32Type);
    auto offsetsType = RankedTensorType::get({experts + 1}, i32Type);
    Value dispatched = allocBuffer(b, loc, rowsType, rows);
    Value rowExpert = allocBuffer(b, loc, rowIdsType, rows);
    Value slot = allocBuffer(b, loc, slotType, tokens);
    Value offsets = allocBuffer(b, loc, offsetsType, {});
    Value counts = allocBuffer(b, loc, RankedTensorType::get({experts}, i32Type), {});
    Value cursor = allocBuffer(b, loc, RankedTensorType::get({experts}, i32Type), {});

    // The expert of (t, j), or -1 for a choice of another rank.
    auto expertOf = [&](OpBuilder &nb, Location nl, Value t, Value j) -> Value {
      Value id = memref::LoadOp::create(nb, nl, ids, ValueRange{t, j});
      Value c0 = arith::ConstantOp::create(nb, nl, nb.getI32IntegerAttr(0));
      Value cE = arith::ConstantOp::create(nb, nl, nb.getI32IntegerAttr(experts));
      Value low = arith::CmpIOp::create(nb, nl, arith::CmpIPredicate::slt, id, c0);
      Value high = arith::CmpIOp::create(nb, nl, arith::CmpIPredicate::sge, id, cE);
      Value foreign = arith::OrIOp::create(nb, nl, low, high);
      Value none = arith::ConstantOp::create(nb, nl, nb.getI32IntegerAttr(-1));
      return arith::SelectOp::create(nb, nl, foreign, none, id);
    };
    auto forChoices = [&](function_ref<void(OpBuilder &, Location, Value, Value)> body) {
      forEach(b, loc, zero, tokens, one, [&](OpBuilder &tb, Location tl, Value t) {
        forEach(tb, tl, zero, k, one, [&](OpBuilder &jb, Location jl, Value j) {
          body(jb, jl, t, j);
        });
      });
    };
    auto ifValid = [](OpBuilder &nb, Location nl, Value id,
                      function_ref<void(OpBuilder &, Location, Value)> then) {
      Value c0 = arith::ConstantOp::create(nb, nl, nb.getI32IntegerAttr(0));
      Value valid = arith::CmpIOp::create(nb, nl, arith::CmpIPredicate::sge, id, c0);
      scf::IfOp::create(nb, nl, valid, [&](OpBuilder &ib, Location il) {
        then(ib, il, arith::IndexCastOp::create(ib, il, ib.getIndexType(), id));
        scf::YieldOp::create(ib, il);
      });
    };

    // counts
    Value zeroI32 = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0));
    linalg::FillOp::create(b, loc, zeroI32, counts);
    forChoices([&](OpBuilder &nb, Location nl, Value t, Value j) {
      ifValid(nb, nl, expertOf(nb, nl, t, j), [&](OpBuilder &ib, Location il, Value id) {
        Value c = memref::LoadOp::create(ib, il, counts, id);
        Value inc = arith::AddIOp::create(
            ib, il, c, arith::ConstantOp::create(ib, il, ib.getI32IntegerAttr(1)));
        memref::StoreOp::create(ib, il, inc, counts, id);
      });
    });
    // offsets: an exclusive scan (padded counts, or e*C)
    auto scan = scf::ForOp::create(
        b, loc, zero, e, one, ValueRange{zeroI32},
        [&](OpBuilder &nb, Location nl, Value ex, ValueRange acc) {
          memref::StoreOp::create(nb, nl, acc[0], offsets, ex);
          memref::StoreOp::create(nb, nl, acc[0], cursor, ex);
          Value size;
          if (capacity) {
            size = arith::ConstantOp::create(nb, nl, nb.getI32IntegerAttr(*capacity));
          } else {
            size = memref::LoadOp::create(nb, nl, counts, ex);
            if (tile > 1) {
              Value t = arith::ConstantOp::create(nb, nl, nb.getI32IntegerAttr(tile));
              Value up = arith::AddIOp::create(
                  nb, nl, size, arith::ConstantOp::create(nb, nl, nb.getI32IntegerAttr(tile - 1)));
              size = arith::MulIOp::create(nb, nl, arith::DivUIOp::create(nb, nl, up, t), t);
            }
          }
          scf::YieldOp::create(nb, nl, ValueRange{arith::AddIOp::create(nb, nl, acc[0], size)});
        });
    memref::StoreOp::create(b, loc, scan.getResult(0), offsets, e);
    // slots, in (token, choice) order within each expert
    forChoices([&](OpBuilder &nb, Location nl, Value t, Value j) {
      Value id = expertOf(nb, nl, t, j);
      Value minusOne = arith::ConstantOp::create(nb, nl, nb.getI32IntegerAttr(-1));
      memref::StoreOp::create(nb, nl, minusOne, slot, ValueRange{t, j});
      ifValid(nb, nl, id, [&](OpBuilder &ib, Location il, Value ex) {
        Value row = memref::LoadOp::create(ib, il, cursor, ex);
        Value next = arith::AddIOp::create(
            ib, il, row, arith::ConstantOp::create(ib, il, ib.getI32IntegerAttr(1)));
        memref::StoreOp::create(ib, il, next, cursor, ex);
        memref::StoreOp::create(ib, il, row, slot, ValueRange{t, j});
        memref::StoreOp::create(ib, il, id, rowExpert,
                                arith::IndexCastOp::create(ib, il, ib.getIndexType(), row)
                                    .getResult());
      });
    });
    // Rows no choice took: padding after each expert's rows, then the tail.
    Value noExpert = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(-1));
    Type element = xType.getElementType();
    Value zeroElement = arith::ConstantOp::create(b, loc, b.getZeroAttr(element));
    forEach(b, loc, zero, e, one, [&](OpBuilder &nb, Location nl, Value ex) {
      Value used = arith::IndexCastOp::create(
          nb, nl, nb.getIndexType(), memref::LoadOp::create(nb, nl, cursor, ex));
      Value next = arith::AddIOp::create(nb, nl, ex, one);
      Value end = loadIndex(nb, nl, offsets, next);
      fillRows(nb, nl, rowExpert, used, end, noExpert, /*inLine=*/true);
      fillRows(nb, nl, dispatched, used, end, zeroElement, /*inLine=*/true);
    });
    Value tail = loadIndex(b, loc, offsets, e);
    fillRows(b, loc, rowExpert, tail, rows, noExpert);
    fillRows(b, loc, dispatched, tail, rows, zeroElement);
    // The copy, on threads: one token's row to each of its rows.
    copyRows(b, loc, x, slot, dispatched, tokens, topK, hidden);

    SmallVector<Value> results = {
        castTo(b, loc, toTensor(b, loc, dispatched, rowsType), op.getDispatched()),
        castTo(b, loc, toTensor(b, loc, rowExpert, rowIdsType), op.getRowExpert()),
        castTo(b, loc, toTensor(b, loc, slot, slotType), op.getSlot())};
    if (op.getExpertOffsets())
      results.push_back(toTensor(b, loc, offsets, offsetsType));
    rewriter.replaceOp(op, results);
    return success();
  }

  /// Each token's row to each of its rows, on threads. A row is contiguous,
  /// so the copy is a memcpy whatever the element type (x86 has no bf16
  /// vectors: copying bf16 as vectors costs LLVM seconds and the CPU more).
  void copyRows(OpBuilder &b, Location loc, Value x, Value slot, Value dispatched,
                Value tokens, int64_t topK, int64_t hidden) const {
    auto rowOf = [&](OpBuilder &nb, Location nl, Value buffer, Value r) -> Value {
      auto type = cast<MemRefType>(buffer.getType());
      SmallVector<OpFoldResult> offsets = {r, nb.getIndexAttr(0)};
      SmallVector<OpFoldResult> sizes = {nb.getIndexAttr(1), nb.getIndexAttr(hidden)};
      SmallVector<OpFoldResult> strides = {nb.getIndexAttr(1), nb.getIndexAttr(1)};
      auto rowType = memref::SubViewOp::inferRankReducedResultType(
          {hidden}, type, offsets, sizes, strides);
      return memref::SubViewOp::create(nb, nl, cast<MemRefType>(rowType), buffer,
                                       offsets, sizes, strides);
    };
    scf::ForallOp::create(
        b, loc, ArrayRef<OpFoldResult>{tokens}, ValueRange{}, std::nullopt,
        [&](OpBuilder &nb, Location nl, ValueRange ivs) {
          Value t = ivs[0];
          Value source = rowOf(nb, nl, x, t);
          for (int64_t j = 0; j < topK; ++j) {
            Value jv = constIndex(nb, nl, j);
            Value row = memref::LoadOp::create(nb, nl, slot, ValueRange{t, jv});
            Value c0 = arith::ConstantOp::create(nb, nl, nb.getI32IntegerAttr(0));
            Value taken = arith::CmpIOp::create(nb, nl, arith::CmpIPredicate::sge, row, c0);
            scf::IfOp::create(nb, nl, taken, [&](OpBuilder &ib, Location il) {
              Value r = arith::IndexCastOp::create(ib, il, ib.getIndexType(), row);
              memref::CopyOp::create(ib, il, source, rowOf(ib, il, dispatched, r));
              scf::YieldOp::create(ib, il);
            });
          }
          scf::InParallelOp::create(nb, nl);
        });
  }

  static Value castTo(OpBuilder &b, Location loc, Value v, Value like) {
    if (v.getType() == like.getType())
      return v;
    return tensor::CastOp::create(b, loc, like.getType(), v);
  }

  CpuCodegenOptions options;
};
} // namespace

void cpu::populateCpuDispatchPatterns(RewritePatternSet &patterns,
                                      const CpuCodegenOptions &options) {
  patterns.add<DispatchToCPU>(patterns.getContext(), options);
}
