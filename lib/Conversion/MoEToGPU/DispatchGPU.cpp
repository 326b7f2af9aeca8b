//===- DispatchGPU.cpp - moe.dispatch as two kernels ----------------------===//
//
// `moe.dispatch` (the padded layout) on the GPU in two kernels instead of
// the quadratic ranks of convert-moe-to-linalg:
//
//   1. one block of 32 warps does the bookkeeping (Bookkeeping below): each
//      warp numbers the choices of its run of them by shuffles and counts,
//      a scan of the counts gives every expert's first row, and a second
//      walk writes each choice's slot, row_expert and the row's token; the
//      padding rows and the rows past the last expert's get row_expert -1
//      and no token. O(T*k) work over 1024 threads, plus O(E log E);
//   2. one block per row: the row's token's x, or zeros (16 bytes a thread
//      where the row divides).
//
// The layout is the one the other lowerings produce (same slots, rows and
// offsets): within an expert, rows follow the choices' order.
//
//===----------------------------------------------------------------------===//
#include "GPUKernels.h"
#include "KernelBuilder.h"
#include "moe/Conversion/PaddedRows.h"
#include "moe/Conversion/ReadBuffer.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::moe;

namespace {
/// Threads of the copy kernel's blocks.
constexpr int64_t kCopyThreads = 256;
/// Warps of the bookkeeping block; each owns a contiguous run of choices.
constexpr int64_t kBookWarps = 32;
/// At most this many experts: the block keeps a count per warp and expert.
constexpr int64_t kMaxExperts = 256;

struct Builder : KernelBuilder {
  /// `count` rounded up to a multiple of `tile` (i32).
  Value padded(Value count, int64_t tile) {
    if (tile == 1)
      return count;
    Value up = arith::AddIOp::create(b, loc, count, i32(tile - 1));
    return arith::MulIOp::create(b, loc, arith::DivUIOp::create(b, loc, up, i32(tile)), i32(tile));
  }
};

/// The bookkeeping block's body. Warp w owns the choices [w*C, (w+1)*C),
/// C = ceil(T*k / 32), and walks them 32 at a time in order, a lane each: a
/// lane learns from the others by shuffles how many lanes before it hold
/// its expert (its rank) and how many in all (the count); the first of
/// them adds the count to the warp's count of that expert.
///   1. perWarp[w][e] = e's choices in w's run;
///   2. thread e: perWarp[.][e] becomes its exclusive prefix over the warps,
///      totals[e] the sum; begins = the exclusive scan of the padded totals
///      (Hillis-Steele in workgroup memory);
///   3. the walk again: choice n of expert e gets row begins[e] +
///      perWarp[w][e] + its rank, and the first lane moves perWarp[w][e] on;
///   4. padding rows and the rows past the last expert's: no expert.
struct Bookkeeping {
  Builder &u;
  Value ids;
  int64_t topK, tile, experts;
  Value pairs, rows, slot, rowExpert, rowToken, offsets;
  Value perWarp, totals, begins; // workgroup memory

  Value tokenOf(Value n) { return arith::DivUIOp::create(u.b, u.loc, n, u.idx(topK)); }
  SmallVector<Value> slotAt(Value n) {
    return {tokenOf(n), arith::RemUIOp::create(u.b, u.loc, n, u.idx(topK))};
  }

  /// The expert of choice n, -1 for another rank's or past the end.
  Value expertOf(Value n) {
    OpBuilder &b = u.b;
    Location loc = u.loc;
    Value inside = u.cmp(arith::CmpIPredicate::ult, n, pairs);
    Value safe = arith::SelectOp::create(b, loc, inside, n, u.idx(0));
    Value id = u.load(ids, slotAt(safe));
    Value foreign = arith::OrIOp::create(b, loc, u.cmp(arith::CmpIPredicate::slt, id, u.i32(0)),
                                         u.cmp(arith::CmpIPredicate::sge, id, u.i32(experts)));
    Value none = arith::OrIOp::create(b, loc, foreign, arith::XOrIOp::create(
        b, loc, inside, arith::ConstantOp::create(b, loc, b.getBoolAttr(true))));
    return arith::SelectOp::create(b, loc, none, u.i32(-1), id);
  }

  /// Calls body(n, id, rank, count) for each choice of the warp's run, 32
  /// at a time; every lane of the warp takes part in every step, those
  /// without a choice of this rank with id -1.
  void walk(Value warp, Value lane,
            function_ref<void(Value n, Value id, Value rank, Value count)> body) {
    OpBuilder &b = u.b;
    Location loc = u.loc;
    Value run = arith::DivUIOp::create(b, loc, u.add(pairs, u.idx(kBookWarps - 1)),
                                       u.idx(kBookWarps));
    Value first = arith::MulIOp::create(b, loc, warp, run);
    Value end = arith::MinUIOp::create(b, loc, u.add(first, run), pairs);
    Value lane32 = u.toI32(lane);
    Value all = u.i32(-1);
    u.forEach(first, u.add(first, run), u.idx(32), [&](Value batch) {
      Value n = u.add(batch, lane);
      Value inRun = u.cmp(arith::CmpIPredicate::ult, n, end);
      Value id = arith::SelectOp::create(b, loc, inRun, expertOf(n), u.i32(-1));
      Value zero = u.i32(0), one = u.i32(1);
      SmallVector<Value> rc =
          u.fold(u.idx(0), u.idx(32), u.idx(1), ValueRange{zero, zero}, [&](Value s, ValueRange acc) {
            Value other = gpu::ShuffleOp::create(b, loc, id, u.toI32(s), u.i32(32),
                                                 gpu::ShuffleMode::IDX)
                              .getShuffleResult();
            Value same = u.cmp(arith::CmpIPredicate::eq, other, id);
            Value before = arith::AndIOp::create(
                b, loc, same, u.cmp(arith::CmpIPredicate::ult, u.toI32(s), lane32));
            return SmallVector<Value>{
                u.add(acc[0], arith::SelectOp::create(b, loc, before, one, zero)),
                u.add(acc[1], arith::SelectOp::create(b, loc, same, one, zero))};
          });
      body(n, id, rc[0], rc[1]);
      // The counts a step wrote are read by the next one's lanes.
      NVVM::SyncWarpOp::create(b, loc, all);
    });
  }

  /// Whether a lane holds a choice and is the first of its expert's.
  Value first(Value id, Value rank) {
    return arith::AndIOp::create(u.b, u.loc, u.cmp(arith::CmpIPredicate::sge, id, u.i32(0)),
                                 u.cmp(arith::CmpIPredicate::eq, rank, u.i32(0)));
  }

  void build(Value tid) {
    OpBuilder &b = u.b;
    Location loc = u.loc;
    Value warp = arith::DivUIOp::create(b, loc, tid, u.idx(32));
    Value lane = arith::RemUIOp::create(b, loc, tid, u.idx(32));
    Value threads = u.idx(kBookWarps * 32);
    Value zero = u.idx(0), one = u.idx(1), zero32 = u.i32(0);
    Value e = tid;
    Value active = u.cmp(arith::CmpIPredicate::ult, e, u.idx(experts));
    u.forEach(tid, u.idx(kBookWarps * experts), threads, [&](Value i) {
      u.store(zero32, perWarp, {arith::DivUIOp::create(b, loc, i, u.idx(experts)),
                                arith::RemUIOp::create(b, loc, i, u.idx(experts))});
    });
    gpu::BarrierOp::create(b, loc);
    // 1. Counts per warp.
    walk(warp, lane, [&](Value, Value id, Value rank, Value count) {
      u.ifThen(first(id, rank), [&] {
        Value at[] = {warp, u.toIndex(id)};
        u.store(u.add(u.load(perWarp, at), count), perWarp, at);
      });
    });
    gpu::BarrierOp::create(b, loc);
    // 2. Prefix over the warps, totals, and the scan of the padded totals.
    u.ifThen(active, [&] {
      Value total = u.fold(zero, u.idx(kBookWarps), one, ValueRange{zero32},
                           [&](Value w, ValueRange acc) {
                             Value c = u.load(perWarp, {w, e});
                             u.store(acc[0], perWarp, {w, e});
                             return SmallVector<Value>{u.add(acc[0], c)};
                           })[0];
      u.store(total, totals, {e});
      u.store(u.padded(total, tile), begins, {e});
    });
    gpu::BarrierOp::create(b, loc);
    u.inclusiveScan(begins, e, active, experts);
    // begins holds the inclusive scan: e's rows start where e - 1's end.
    auto beginOf = [&](Value expert) -> Value {
      Value inclusive = u.load(begins, {expert});
      return arith::SubIOp::create(b, loc, inclusive,
                                   u.padded(u.load(totals, {expert}), tile));
    };
    Value used = u.load(begins, {u.idx(experts - 1)});
    u.ifThen(active, [&] { u.store(beginOf(e), offsets, {e}); });
    u.ifThen(u.cmp(arith::CmpIPredicate::eq, tid, zero),
             [&] { u.store(used, offsets, {u.idx(experts)}); });
    // 3. Rows, in choice order within each expert.
    walk(warp, lane, [&](Value n, Value id, Value rank, Value count) {
      Value valid = u.cmp(arith::CmpIPredicate::sge, id, zero32);
      Value expert = u.toIndex(arith::SelectOp::create(b, loc, valid, id, zero32));
      Value at[] = {warp, expert};
      Value before = u.load(perWarp, at);
      u.ifThen(valid, [&] {
        Value row = u.add(u.add(beginOf(expert), before), rank);
        u.store(row, slot, slotAt(n));
        Value rowIndex = u.toIndex(row);
        u.store(id, rowExpert, {rowIndex});
        u.store(u.toI32(tokenOf(n)), rowToken, {rowIndex});
      });
      // Every lane of the step has read the count before the first moves it.
      NVVM::SyncWarpOp::create(b, loc, u.i32(-1));
      u.ifThen(first(id, rank), [&] { u.store(u.add(before, count), perWarp, at); });
    });
    // Other ranks' choices.
    u.forEach(tid, pairs, threads, [&](Value n) {
      Value id = u.load(ids, slotAt(n));
      Value foreign = arith::OrIOp::create(b, loc, u.cmp(arith::CmpIPredicate::slt, id, zero32),
                                           u.cmp(arith::CmpIPredicate::sge, id, u.i32(experts)));
      u.ifThen(foreign, [&] { u.store(u.i32(-1), slot, slotAt(n)); });
    });
    // 4. Padding rows, then the rows past the last expert's.
    u.ifThen(active, [&] {
      Value begin = beginOf(e);
      u.forEach(u.toIndex(u.add(begin, u.load(totals, {e}))), u.toIndex(u.load(begins, {e})), one,
                [&](Value row) {
                  u.store(u.i32(-1), rowExpert, {row});
                  u.store(u.i32(-1), rowToken, {row});
                });
    });
    u.forEach(u.add(u.toIndex(used), tid), rows, threads, [&](Value row) {
      u.store(u.i32(-1), rowExpert, {row});
      u.store(u.i32(-1), rowToken, {row});
    });
  }
};

struct DispatchToGPU : OpRewritePattern<DispatchOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(DispatchOp op, PatternRewriter &rewriter) const override {
    if (op.getCapacity())
      return rewriter.notifyMatchFailure(op, "the masked layout stays with linalg");
    const int64_t experts = op.getNumExperts();
    if (experts > kMaxExperts)
      return rewriter.notifyMatchFailure(op, "a count per warp and expert: at most 256 experts");
    RankedTensorType xType = op.getX().getType();
    if (xType.isDynamicDim(1))
      return rewriter.notifyMatchFailure(op, "static H");
    const int64_t topK = op.getExpertIds().getType().getDimSize(1);
    const int64_t tile = op.getRowTileOrOne();
    const int64_t hidden = xType.getDimSize(1);
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Builder u{{b, loc}};
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

    // 1. Bookkeeping: one block of 32 warps.
    auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
    auto sharedI32 = [&](ArrayRef<int64_t> shape) {
      return MemRefType::get(shape, i32, MemRefLayoutAttrInterface{}, workgroup);
    };
    Value one = u.idx(1);
    auto book = gpu::LaunchOp::create(
        b, loc, one, one, one, u.idx(kBookWarps * 32), one, one, nullptr, nullptr, {},
        TypeRange{sharedI32({kBookWarps, experts}), sharedI32({experts}), sharedI32({experts})});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&book.getBody().front());
      ArrayRef<BlockArgument> memory = book.getWorkgroupAttributions();
      Bookkeeping{u, ids, topK, tile, experts, pairs, rows, slot, rowExpert, rowToken, offsets,
                  memory[0], memory[1], memory[2]}
          .build(book.getThreadIds().x);
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
      // 16 bytes a thread at a time where the row divides.
      Type element = xType.getElementType();
      int64_t bytes = element.getIntOrFloatBitWidth() / 8;
      int64_t width = bytes >= 1 && bytes <= 16 && hidden % (16 / bytes) == 0 ? 16 / bytes : 1;
      auto vectorType = VectorType::get({width}, element);
      Value zeros = arith::ConstantOp::create(b, loc, b.getZeroAttr(vectorType));
      u.forEach(copy.getThreadIds().x, u.idx(hidden / width), u.idx(kCopyThreads), [&](Value i) {
        Value h = arith::MulIOp::create(b, loc, i, u.idx(width));
        auto load = vector::LoadOp::create(b, loc, vectorType, x, ValueRange{source, h});
        load.setAlignment(uint64_t(width * bytes));
        Value v = arith::SelectOp::create(b, loc, taken, load, zeros);
        auto store = vector::StoreOp::create(b, loc, v, dispatched, ValueRange{row, h});
        store.setAlignment(uint64_t(width * bytes));
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
