//===- DispatchGPU.cpp - moe.dispatch as two kernels ----------------------===//
//
// `moe.dispatch` (the padded layout) on the GPU in O(T*k) per expert, in
// two kernels instead of the quadratic ranks of convert-moe-to-linalg:
//
//   1. one block, one thread per expert e: counts e's choices in (token,
//      choice) order, reads every count from workgroup memory to find where
//      its rows begin (the exclusive prefix sum of the padded counts), then
//      walks the choices again and numbers its own: slot, row_expert and the
//      token of each row; its padding rows, and the rows past the last
//      expert's, get row_expert -1 and no token;
//   2. one block per row: the row's token's x, or zeros.
//
// The layout is the one the other lowerings produce (same slots, rows and
// offsets): within an expert, rows follow the choices' order.
//
//===----------------------------------------------------------------------===//
#include "GPUKernels.h"
#include "moe/Conversion/PaddedRows.h"
#include "moe/Conversion/ReadBuffer.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::moe;

namespace {
/// Threads of the copy kernel's blocks.
constexpr int64_t kCopyThreads = 256;

struct Builder {
  OpBuilder &b;
  Location loc;

  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value i32(int64_t v) { return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v)); }
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

  /// `count` rounded up to a multiple of `tile` (i32).
  Value padded(Value count, int64_t tile) {
    if (tile == 1)
      return count;
    Value up = arith::AddIOp::create(b, loc, count, i32(tile - 1));
    return arith::MulIOp::create(b, loc, arith::DivUIOp::create(b, loc, up, i32(tile)), i32(tile));
  }
};

struct DispatchToGPU : OpRewritePattern<DispatchOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(DispatchOp op, PatternRewriter &rewriter) const override {
    if (op.getCapacity())
      return rewriter.notifyMatchFailure(op, "the masked layout stays with linalg");
    const int64_t experts = op.getNumExperts();
    if (experts > 1024)
      return rewriter.notifyMatchFailure(op, "one thread per expert: at most 1024");
    RankedTensorType xType = op.getX().getType();
    if (xType.isDynamicDim(1))
      return rewriter.notifyMatchFailure(op, "static H");
    const int64_t topK = op.getExpertIds().getType().getDimSize(1);
    const int64_t tile = op.getRowTileOrOne();
    const int64_t hidden = xType.getDimSize(1);
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Builder u{b, loc};
    Value tokens = tensor::DimOp::create(b, loc, op.getX(), 0);
    Value pairs = arith::MulIOp::create(b, loc, tokens, u.idx(topK));
    Value rows = paddedRows(b, loc, pairs, experts, tile);
    auto alloc = [&](ArrayRef<int64_t> shape, Type element, ValueRange sizes) -> Value {
      return memref::AllocOp::create(b, loc, MemRefType::get(shape, element), sizes);
    };
    Type i32 = b.getI32Type();
    int64_t dyn = ShapedType::kDynamic;
    Value dispatched = alloc({dyn, hidden}, xType.getElementType(), rows);
    Value rowExpert = alloc({dyn}, i32, rows);
    Value rowToken = alloc({dyn}, i32, rows);
    Value slot = alloc({dyn, topK}, i32, tokens);
    Value offsets = alloc({experts + 1}, i32, {});
    Value ids = readBuffer(b, loc, op.getExpertIds());
    Value x = readBuffer(b, loc, op.getX());

    // 1. Bookkeeping: one block, a thread per expert.
    auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
    auto countsType =
        MemRefType::get({experts}, i32, MemRefLayoutAttrInterface{}, workgroup);
    Value one = u.idx(1);
    auto book = gpu::LaunchOp::create(b, loc, one, one, one, u.idx((experts + 31) / 32 * 32), one,
                                      one, nullptr, nullptr, {}, TypeRange{countsType});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&book.getBody().front());
      Value e = book.getThreadIds().x;
      Value counts = book.getWorkgroupAttributions()[0];
      Value mine = u.toI32(e);
      Value active = u.cmp(arith::CmpIPredicate::ult, e, u.idx(experts));
      Value zero = u.idx(0), zero32 = u.i32(0), one32 = u.i32(1);
      // The expert of choice n (t = n / k, j = n % k), -1 for another rank's.
      auto expertOf = [&](Value n) {
        Value id = u.load(ids, {arith::DivUIOp::create(b, loc, n, u.idx(topK)),
                                arith::RemUIOp::create(b, loc, n, u.idx(topK))});
        Value foreign = arith::OrIOp::create(b, loc, u.cmp(arith::CmpIPredicate::slt, id, zero32),
                                             u.cmp(arith::CmpIPredicate::sge, id, u.i32(experts)));
        return arith::SelectOp::create(b, loc, foreign, u.i32(-1), id).getResult();
      };
      auto slotAt = [&](Value n) -> SmallVector<Value> {
        return {arith::DivUIOp::create(b, loc, n, u.idx(topK)),
                arith::RemUIOp::create(b, loc, n, u.idx(topK))};
      };
      u.ifThen(active, [&] {
        Value count = u.fold(zero, pairs, one, ValueRange{zero32}, [&](Value n, ValueRange acc) {
          Value ours = u.cmp(arith::CmpIPredicate::eq, expertOf(n), mine);
          return SmallVector<Value>{
              u.add(acc[0], arith::SelectOp::create(b, loc, ours, one32, zero32))};
        })[0];
        u.store(count, counts, {e});
      });
      gpu::BarrierOp::create(b, loc);
      u.ifThen(active, [&] {
        Value begin = u.fold(zero, e, one, ValueRange{zero32}, [&](Value other, ValueRange acc) {
          return SmallVector<Value>{u.add(acc[0], u.padded(u.load(counts, {other}), tile))};
        })[0];
        u.store(begin, offsets, {e});
        Value count = u.load(counts, {e});
        Value end = u.add(begin, count);
        u.fold(zero, pairs, one, ValueRange{begin}, [&](Value n, ValueRange acc) {
          Value id = expertOf(n);
          Value ours = u.cmp(arith::CmpIPredicate::eq, id, mine);
          u.ifThen(ours, [&] {
            Value row = u.toIndex(acc[0]);
            u.store(acc[0], slot, slotAt(n));
            u.store(mine, rowExpert, {row});
            u.store(u.toI32(arith::DivUIOp::create(b, loc, n, u.idx(topK))), rowToken, {row});
          });
          // Thread 0 also marks the other ranks' choices.
          Value foreign = arith::AndIOp::create(b, loc, u.cmp(arith::CmpIPredicate::eq, e, zero),
                                                u.cmp(arith::CmpIPredicate::slt, id, zero32));
          u.ifThen(foreign, [&] { u.store(u.i32(-1), slot, slotAt(n)); });
          return SmallVector<Value>{
              u.add(acc[0], arith::SelectOp::create(b, loc, ours, one32, zero32))};
        });
        // The expert's padding rows.
        u.forEach(u.toIndex(end), u.toIndex(u.add(begin, u.padded(count, tile))), one,
                  [&](Value row) {
                    u.store(u.i32(-1), rowExpert, {row});
                    u.store(u.i32(-1), rowToken, {row});
                  });
      });
      // The rows past the last expert's, strided over the threads.
      Value used = u.fold(zero, u.idx(experts), one, ValueRange{zero32},
                          [&](Value other, ValueRange acc) {
                            return SmallVector<Value>{
                                u.add(acc[0], u.padded(u.load(counts, {other}), tile))};
                          })[0];
      u.ifThen(u.cmp(arith::CmpIPredicate::eq, e, zero),
               [&] { u.store(used, offsets, {u.idx(experts)}); });
      Value threads = book.getBlockSizeX();
      u.forEach(u.add(u.toIndex(used), e), rows, threads, [&](Value row) {
        u.store(u.i32(-1), rowExpert, {row});
        u.store(u.i32(-1), rowToken, {row});
      });
      gpu::TerminatorOp::create(b, loc);
    }

    // 2. The copy: a block per row, its token's x or zeros.
    auto copy = gpu::LaunchOp::create(b, loc, rows, one, one, u.idx(kCopyThreads), one, one);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&copy.getBody().front());
      Value row = copy.getBlockIds().x;
      Value token = u.load(rowToken, {row});
      Value taken = u.cmp(arith::CmpIPredicate::sge, token, u.i32(0));
      Value source = arith::SelectOp::create(b, loc, taken, u.toIndex(token), u.idx(0));
      Type element = xType.getElementType();
      Value zeroElement = arith::ConstantOp::create(b, loc, b.getZeroAttr(element));
      u.forEach(copy.getThreadIds().x, u.idx(hidden), u.idx(kCopyThreads), [&](Value h) {
        Value v = u.load(x, {source, h});
        u.store(arith::SelectOp::create(b, loc, taken, v, zeroElement), dispatched, {row, h});
      });
      gpu::TerminatorOp::create(b, loc);
    }

    auto asTensor = [&](Value buffer, Value like) -> Value {
      auto memrefType = cast<MemRefType>(buffer.getType());
      Value t = bufferization::ToTensorOp::create(
          b, loc, RankedTensorType::get(memrefType.getShape(), memrefType.getElementType()),
          buffer, /*restrict=*/true, /*writable=*/true);
      return t.getType() == like.getType()
                 ? t
                 : tensor::CastOp::create(b, loc, like.getType(), t).getResult();
    };
    SmallVector<Value> results = {asTensor(dispatched, op.getDispatched()),
                                  asTensor(rowExpert, op.getRowExpert()),
                                  asTensor(slot, op.getSlot())};
    if (Value expertOffsets = op.getExpertOffsets())
      results.push_back(asTensor(offsets, expertOffsets));
    rewriter.replaceOp(op, results);
    return success();
  }
};
} // namespace

void mlir::moe::populateDispatchToGPUPatterns(RewritePatternSet &patterns) {
  patterns.add<DispatchToGPU>(patterns.getContext());
}
