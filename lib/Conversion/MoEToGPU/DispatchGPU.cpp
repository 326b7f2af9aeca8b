//===- DispatchGPU.cpp - moe.dispatch as two kernels ----------------------===//
//
// `moe.dispatch` (the padded layout) on the GPU in two kernels instead of
// the quadratic ranks of convert-moe-to-linalg:
//
//   1. three kernels do the bookkeeping (Bookkeeping below; one, its steps
//      a barrier apart, for at most one block's choices): blocks of 32
//      warps count each expert's choices in their runs of them (match.any
//      a step of 32), one block scans the counts into every expert's first
//      row and each block's part of it, and the blocks walk their runs
//      again, writing each choice's slot, row_expert and the row's token;
//      the padding rows and the rows past the last expert's get row_expert
//      -1 and no token. O(T*k) work over T*k / 2 threads, plus
//      O(E * T*k / 2048 + E log E);
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
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Dominance.h"

using namespace mlir;
using namespace mlir::moe;

namespace {
/// Threads of the copy kernel's blocks.
constexpr int64_t kCopyThreads = 256;
/// Warps of a bookkeeping block; each owns a contiguous run of choices.
constexpr int64_t kBookWarps = 32;
/// Choices of a bookkeeping block: 2 steps of 32 a warp (more blocks, and
/// a shorter walk each, at large T).
constexpr int64_t kBlockChoices = kBookWarps * 32 * 2;
/// At most this many experts: the block keeps a count per warp and expert.
constexpr int64_t kMaxExperts = 256;

struct Builder : KernelBuilder {
  Value mul(Value lhs, Value rhs) { return arith::MulIOp::create(b, loc, lhs, rhs); }
  /// `count` rounded up to a multiple of `tile` (i32).
  Value padded(Value count, int64_t tile) {
    if (tile == 1)
      return count;
    Value up = arith::AddIOp::create(b, loc, count, i32(tile - 1));
    return arith::MulIOp::create(b, loc, arith::DivUIOp::create(b, loc, up, i32(tile)), i32(tile));
  }
};

/// The bookkeeping, in blocks of 32 warps: block g owns the choices
/// [g*P, (g+1)*P), P = kBlockChoices, and warp w of it a run of P / 32 of
/// them, which it walks 32 at a time in order, a lane each: a lane learns
/// from match.any how many lanes before it hold its expert (its rank) and
/// how many in all (the count); the first of them adds the count to the
/// warp's count of that expert.
///   1. count (a block each): perWarp[w][e] = e's choices in w's run;
///      blockCounts[g][e] their sum over the block's warps;
///   2. scan (one block): thread e turns blockCounts[.][e] into its
///      exclusive prefix over the blocks, totals[e] the sum; begins = the
///      scan of the padded totals (Hillis-Steele in workgroup memory), the
///      expert offsets; padding rows and the rows past the last expert's
///      get no expert;
///   3. rows (a block each): the counts again, perWarp[w][e] becomes where
///      w's rows of e start (offsets[e] + the blocks' before + the warps'
///      before); the walk again: choice n of expert e gets row
///      perWarp[w][e] + its rank, and the first lane moves perWarp[w][e] on.
struct Bookkeeping {
  Builder &u;
  Value ids;
  int64_t topK, tile, experts;
  Value pairs, rows, slot, rowExpert, rowToken, offsets, blockCounts;

  Value tokenOf(Value n) { return arith::DivUIOp::create(u.b, u.loc, n, u.idx(topK)); }
  SmallVector<Value> slotAt(Value n) {
    return {tokenOf(n), arith::RemUIOp::create(u.b, u.loc, n, u.idx(topK))};
  }

  /// The expert of choice n, -1 for another rank's or past the end.
  Value expertOf(Value n) {
    OpBuilder &b = u.b;
    Location loc = u.loc;
    Value inside = u.cmp(arith::CmpIPredicate::ult, n, pairs);
    // Nothing is loaded past the end: without tokens the ids are empty.
    auto loaded = scf::IfOp::create(b, loc, b.getI32Type(), inside, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loaded.thenBlock());
      scf::YieldOp::create(b, loc, u.load(ids, slotAt(n)));
      b.setInsertionPointToStart(loaded.elseBlock());
      scf::YieldOp::create(b, loc, u.i32(-1));
    }
    Value id = loaded.getResult(0);
    Value negative = u.cmp(arith::CmpIPredicate::slt, id, u.i32(0));
    Value tooLarge = u.cmp(arith::CmpIPredicate::sge, id, u.i32(experts));
    Value foreign = arith::OrIOp::create(b, loc, negative, tooLarge);
    return arith::SelectOp::create(b, loc, foreign, u.i32(-1), id);
  }

  /// Calls body(n, id, rank, count) for each choice of warp `warp` of
  /// block `block`, 32 at a time; every lane of the warp takes part in
  /// every step, those without a choice of this rank with id -1. A lane's
  /// rank and count among the step's lanes of its expert come from one
  /// match.any: the lanes below it of the mask, and all of them.
  void walk(Value block, Value warp, Value lane,
            function_ref<void(Value n, Value id, Value rank, Value count)> body) {
    OpBuilder &b = u.b;
    Location loc = u.loc;
    const int64_t run = kBlockChoices / kBookWarps;
    Value first = u.add(u.mul(block, u.idx(kBlockChoices)), u.mul(warp, u.idx(run)));
    Value all = u.i32(-1);
    Value below = arith::SubIOp::create(
        b, loc, arith::ShLIOp::create(b, loc, u.i32(1), u.toI32(lane)), u.i32(1));
    u.forEach(first, u.add(first, u.idx(run)), u.idx(32), [&](Value batch) {
      Value n = u.add(batch, lane);
      Value id = expertOf(n);
      Value same =
          NVVM::MatchSyncOp::create(b, loc, b.getI32Type(), all, id, NVVM::MatchSyncKind::any);
      Value rank = math::CtPopOp::create(b, loc, arith::AndIOp::create(b, loc, same, below));
      body(n, id, rank, math::CtPopOp::create(b, loc, same));
      // The counts a step wrote are read by the next one's lanes.
      NVVM::SyncWarpOp::create(b, loc, all);
    });
  }

  /// Whether a lane holds a choice and is the first of its expert's.
  Value first(Value id, Value rank) {
    return arith::AndIOp::create(u.b, u.loc, u.cmp(arith::CmpIPredicate::sge, id, u.i32(0)),
                                 u.cmp(arith::CmpIPredicate::eq, rank, u.i32(0)));
  }

  /// perWarp[w][e]: e's choices in warp w's run of block `block`.
  void countPerWarp(Value block, Value tid, Value perWarp) {
    OpBuilder &b = u.b;
    Location loc = u.loc;
    Value warp = arith::DivUIOp::create(b, loc, tid, u.idx(32));
    Value lane = arith::RemUIOp::create(b, loc, tid, u.idx(32));
    u.forEach(tid, u.idx(kBookWarps * experts), u.idx(kBookWarps * 32), [&](Value i) {
      u.store(u.i32(0), perWarp,
              {arith::DivUIOp::create(b, loc, i, u.idx(experts)),
               arith::RemUIOp::create(b, loc, i, u.idx(experts))});
    });
    gpu::BarrierOp::create(b, loc);
    walk(block, warp, lane, [&](Value, Value id, Value rank, Value count) {
      u.ifThen(first(id, rank), [&] {
        Value at[] = {warp, u.toIndex(id)};
        u.store(u.add(u.load(perWarp, at), count), perWarp, at);
      });
    });
    gpu::BarrierOp::create(b, loc);
  }

  /// 1. blockCounts[block][e] = e's choices in the block's.
  void count(Value block, Value tid, Value perWarp) {
    countPerWarp(block, tid, perWarp);
    Value zero = u.idx(0), one = u.idx(1);
    u.ifThen(u.cmp(arith::CmpIPredicate::ult, tid, u.idx(experts)), [&] {
      Value total =
          u.fold(zero, u.idx(kBookWarps), one, ValueRange{u.i32(0)}, [&](Value w, ValueRange acc) {
            return SmallVector<Value>{u.add(acc[0], u.load(perWarp, {w, tid}))};
          })[0];
      u.store(total, blockCounts, {block, tid});
    });
  }

  /// 2. The blocks' prefixes, the offsets, the rows of no expert.
  void scan(Value blocks, Value tid, Value totals, Value begins) {
    OpBuilder &b = u.b;
    Location loc = u.loc;
    Value threads = u.idx(kBookWarps * 32);
    Value zero = u.idx(0), one = u.idx(1), zero32 = u.i32(0);
    Value e = tid;
    Value active = u.cmp(arith::CmpIPredicate::ult, e, u.idx(experts));
    u.ifThen(active, [&] {
      Value total = u.fold(zero, blocks, one, ValueRange{zero32}, [&](Value g, ValueRange acc) {
        Value c = u.load(blockCounts, {g, e});
        u.store(acc[0], blockCounts, {g, e});
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
    // Padding rows, then the rows past the last expert's.
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

  /// 3. Each choice's row (slot, row_expert, the row's token), in choice
  /// order within an expert; other ranks' choices get slot -1. `counted`:
  /// perWarp still holds this block's counts from step 1.
  void number(Value block, Value tid, Value perWarp, bool counted = false) {
    OpBuilder &b = u.b;
    Location loc = u.loc;
    Value warp = arith::DivUIOp::create(b, loc, tid, u.idx(32));
    Value lane = arith::RemUIOp::create(b, loc, tid, u.idx(32));
    Value zero32 = u.i32(0);
    if (!counted)
      countPerWarp(block, tid, perWarp);
    u.ifThen(u.cmp(arith::CmpIPredicate::ult, tid, u.idx(experts)), [&] {
      Value offset = u.load(offsets, {tid});
      Value start = u.add(offset, u.load(blockCounts, {block, tid}));
      u.fold(u.idx(0), u.idx(kBookWarps), u.idx(1), ValueRange{start},
             [&](Value w, ValueRange acc) {
               Value c = u.load(perWarp, {w, tid});
               u.store(acc[0], perWarp, {w, tid});
               return SmallVector<Value>{u.add(acc[0], c)};
             });
    });
    gpu::BarrierOp::create(b, loc);
    walk(block, warp, lane, [&](Value n, Value id, Value rank, Value count) {
      Value valid = u.cmp(arith::CmpIPredicate::sge, id, zero32);
      Value expert = u.toIndex(arith::SelectOp::create(b, loc, valid, id, zero32));
      Value at[] = {warp, expert};
      Value before = u.load(perWarp, at);
      u.ifThen(valid, [&] {
        Value row = u.add(before, rank);
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
    Value begin = u.mul(block, u.idx(kBlockChoices));
    Value end = arith::MinUIOp::create(b, loc, u.add(begin, u.idx(kBlockChoices)), pairs);
    u.forEach(u.add(begin, tid), end, u.idx(kBookWarps * 32), [&](Value n) {
      Value id = u.load(ids, slotAt(n));
      Value foreign = arith::OrIOp::create(b, loc, u.cmp(arith::CmpIPredicate::slt, id, zero32),
                                           u.cmp(arith::CmpIPredicate::sge, id, u.i32(experts)));
      u.ifThen(foreign, [&] { u.store(u.i32(-1), slot, slotAt(n)); });
    });
  }
};

/// Whether `other` lays its rows out as `op` does (the same choices, experts
/// and tile), so that one bookkeeping serves both.
bool sameLayout(DispatchOp op, DispatchOp other) {
  return other.getExpertIds() == op.getExpertIds() && other.getNumExperts() == op.getNumExperts() &&
         other.getRowTileOrOne() == op.getRowTileOrOne() && !other.getCapacity() &&
         !other.getX().getType().isDynamicDim(1);
}

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
    // The dispatches of the same choices in this block (an FP8 dispatch's
    // codes and scales, a packing's rows and routes) share one bookkeeping
    // and one copy kernel, at the first of them, where all their rows exist.
    SmallVector<DispatchOp> payloads;
    for (auto other : op->getBlock()->getOps<DispatchOp>())
      if (sameLayout(op, other))
        payloads.push_back(other);
    DominanceInfo dominance;
    if (!llvm::all_of(payloads, [&](DispatchOp other) {
          return other == payloads.front() ||
                 dominance.properlyDominates(other.getX(), payloads.front());
        }))
      payloads = {op};
    rewriter.setInsertionPoint(payloads.front());
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Builder u{{b, loc}};
    Value tokens = tensor::DimOp::create(b, loc, op.getExpertIds(), 0);
    Value pairs = arith::MulIOp::create(b, loc, tokens, u.idx(topK));
    Value rows = paddedRows(b, loc, pairs, experts, tile);
    auto alloc = [&](ArrayRef<int64_t> shape, Type element, ValueRange sizes) -> Value {
      return memref::AllocOp::create(b, loc, MemRefType::get(shape, element), sizes);
    };
    Type i32 = b.getI32Type();
    int64_t dyn = ShapedType::kDynamic;
    SmallVector<Value> dispatched;
    for (DispatchOp payload : payloads)
      dispatched.push_back(alloc({dyn, payload.getX().getType().getDimSize(1)},
                                 payload.getX().getType().getElementType(), rows));
    Value rowExpert = alloc({dyn}, i32, rows);
    Value rowToken = alloc({dyn}, i32, rows);
    Value slot = alloc({dyn, topK}, i32, tokens);
    Value offsets = alloc({experts + 1}, i32, {});
    Value ids = readBuffer(b, loc, op.getExpertIds());

    // 1-3. Bookkeeping: blocks of 32 warps count, one block scans, blocks
    // number the rows.
    auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
    auto sharedI32 = [&](ArrayRef<int64_t> shape) {
      return MemRefType::get(shape, i32, MemRefLayoutAttrInterface{}, workgroup);
    };
    Value one = u.idx(1);
    Value blocks = arith::CeilDivUIOp::create(b, loc, pairs, u.idx(kBlockChoices));
    Value blockCounts =
        alloc({dyn, experts}, i32, arith::MaxUIOp::create(b, loc, blocks, one).getResult());
    Bookkeeping book{u,    ids,  topK,      tile,     experts, pairs,
                     rows, slot, rowExpert, rowToken, offsets, blockCounts};
    auto launch = [&](Value grid, TypeRange memory,
                      function_ref<void(Value, Value, ArrayRef<BlockArgument>)> body) {
      auto kernel = gpu::LaunchOp::create(b, loc, grid, one, one, u.idx(kBookWarps * 32), one, one,
                                          nullptr, nullptr, {}, memory);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&kernel.getBody().front());
      body(kernel.getBlockIds().x, kernel.getThreadIds().x, kernel.getWorkgroupAttributions());
      gpu::TerminatorOp::create(b, loc);
    };
    auto perWarp = sharedI32({kBookWarps, experts});
    // Up to one block's choices (decode), one kernel takes the three steps
    // a barrier apart, counting once: two launches fewer.
    auto oneBlock =
        scf::IfOp::create(b, loc, u.cmp(arith::CmpIPredicate::ule, pairs, u.idx(kBlockChoices)),
                          /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(oneBlock.thenBlock());
      launch(one, TypeRange{perWarp, sharedI32({experts}), sharedI32({experts})},
             [&](Value, Value tid, ArrayRef<BlockArgument> memory) {
               Value block = u.idx(0);
               book.count(block, tid, memory[0]);
               gpu::BarrierOp::create(b, loc);
               book.scan(blocks, tid, memory[1], memory[2]);
               gpu::BarrierOp::create(b, loc);
               book.number(block, tid, memory[0], /*counted=*/true);
             });
      b.setInsertionPointToStart(oneBlock.elseBlock());
      launch(blocks, perWarp, [&](Value block, Value tid, ArrayRef<BlockArgument> memory) {
        book.count(block, tid, memory[0]);
      });
      launch(one, TypeRange{sharedI32({experts}), sharedI32({experts})},
             [&](Value, Value tid, ArrayRef<BlockArgument> memory) {
               book.scan(blocks, tid, memory[0], memory[1]);
             });
      launch(blocks, perWarp, [&](Value block, Value tid, ArrayRef<BlockArgument> memory) {
        book.number(block, tid, memory[0]);
      });
    }

    // 2. The copy: a block per row, its token's row of each payload, or
    // zeros.
    SmallVector<Value> sources;
    for (DispatchOp payload : payloads)
      sources.push_back(readBuffer(b, loc, payload.getX()));
    auto copy = gpu::LaunchOp::create(b, loc, rows, one, one, u.idx(kCopyThreads), one, one);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&copy.getBody().front());
      Value row = copy.getBlockIds().x;
      Value token = u.load(rowToken, {row});
      Value taken = u.cmp(arith::CmpIPredicate::sge, token, u.i32(0));
      Value source = arith::SelectOp::create(b, loc, taken, u.toIndex(token), u.idx(0));
      for (auto [x, out] : llvm::zip(sources, dispatched)) {
        // 16 bytes a thread at a time where the row divides.
        auto type = cast<MemRefType>(out.getType());
        Type element = type.getElementType();
        const int64_t hidden = type.getDimSize(1);
        int64_t bytes = element.getIntOrFloatBitWidth() / 8;
        int64_t width = bytes >= 1 && bytes <= 16 && hidden % (16 / bytes) == 0 ? 16 / bytes : 1;
        auto vectorType = VectorType::get({width}, element);
        Value zeros = arith::ConstantOp::create(b, loc, b.getZeroAttr(vectorType));
        u.forEach(copy.getThreadIds().x, u.idx(hidden / width), u.idx(kCopyThreads), [&](Value i) {
          Value h = arith::MulIOp::create(b, loc, i, u.idx(width));
          auto load = vector::LoadOp::create(b, loc, vectorType, x, ValueRange{source, h});
          load.setAlignment(uint64_t(width * bytes));
          Value v = arith::SelectOp::create(b, loc, taken, load, zeros);
          auto store = vector::StoreOp::create(b, loc, v, out, ValueRange{row, h});
          store.setAlignment(uint64_t(width * bytes));
        });
      }
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
    for (auto [payload, rowsOut] : llvm::zip(payloads, dispatched)) {
      SmallVector<Value> results = {asTensor(rowsOut, payload.getDispatched()),
                                    asTensor(rowExpert, payload.getRowExpert()),
                                    asTensor(slot, payload.getSlot())};
      if (Value expertOffsets = payload.getExpertOffsets())
        results.push_back(asTensor(offsets, expertOffsets));
      rewriter.replaceOp(payload, results);
    }
    return success();
  }
};
} // namespace

void mlir::moe::populateDispatchToGPUPatterns(RewritePatternSet &patterns) {
  patterns.add<DispatchToGPU>(patterns.getContext());
}
