//===- GemmWgmma.cpp - the block form's products by wgmma (sm_90a) --------===//
//
// Hopper's warpgroup MMA reads both operands from shared memory through
// 64-bit descriptors, so the products need no ldmatrix and no fragment
// registers: per k16 of a stage one `wgmma.mma_async` m64nCk16 of a
// warpgroup's 64 rows by C weight rows (a block of 128 rows has two
// warpgroups, which share the staged weights). The stages are rows of 64
// of depth (128 bytes), stored with the 128-byte swizzle (16-byte chunk c
// of row r at chunk c ^ (r % 8)) that the descriptors name, which keeps
// the 8 rows a core matrix spans in distinct banks.
//
// FP8 weights are staged as codes and decoded, each step, into one bf16
// tile (exact values); the products of a scale block sum into zeros, then
// join the total times the block's scale, as the decode form does.
//
// With FP8 rows as well (quantized per 128 of depth, QuantizeGPU.cpp) the
// stages hold codes, 128 deep: the same 128-byte swizzled rows, read by
// four e4m3 m64nCk32 products a step, each 32 bytes further as k16 of bf16
// is. A step is one row scale group, so its products sum into zeros and
// join the total times the row's scale and the weight block's.
//
//===----------------------------------------------------------------------===//
#include "GPUKernels.h"
#include "GemmKernel.h"

#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;

namespace mlir::moe::gemm {
namespace {
/// Bytes of depth one wgmma step advances inside a swizzled row: k16 of
/// bf16, k32 of FP8.
constexpr int64_t kStepBytes = 32;

/// The pieces both wgmma forms share, for one block of `shape`; `tid` is
/// the thread in the block.
struct Warpgroup {
  Kernel &k;
  BlockShape shape;
  Value tid;
  /// The thread's warpgroup: rows 64 * group.. of the block.
  Value group = arith::DivUIOp::create(k.b, k.loc, tid, k.idx(kWgmmaThreads));

  Value i64(int64_t v) { return arith::ConstantOp::create(k.b, k.loc, k.b.getI64IntegerAttr(v)); }

  /// Elements of a 16-byte chunk of a staged row.
  int64_t chunkElements() const { return 16 / shape.elementBytes(); }

  /// Chunk i of this thread among the 16-byte chunks of rows of
  /// `perRow` chunks: its row and chunk.
  std::pair<Value, Value> chunkAt(int64_t i, int64_t perRow) {
    Value chunk = k.add(tid, k.idx(shape.threads() * i));
    return {arith::DivUIOp::create(k.b, k.loc, chunk, k.idx(perRow)),
            arith::RemUIOp::create(k.b, k.loc, chunk, k.idx(perRow))};
  }

  /// Where 16-byte chunk c of `row` lives in a swizzled tile: chunk
  /// c ^ row % 8 of the row, as an element index.
  Value swizzled(Value row, Value c) {
    Value slot =
        arith::XOrIOp::create(k.b, k.loc, c, arith::RemUIOp::create(k.b, k.loc, row, k.idx(8)));
    return k.mul(slot, k.idx(chunkElements()));
  }

  /// cp.async of the block's rows [rowStart, rowEnd) of `source` (bf16 rows,
  /// or their FP8 codes) at depth k0 into stage `stage` of tileA, swizzled;
  /// rows past rowEnd read its last one.
  void copyRows(SmallVector<Value> &tokens, Value source, Value tileA, Value stage, Value k0,
                Value rowStart, Value rowEnd) {
    const int64_t run = chunkElements(), perRow = shape.depth / run;
    Value last = arith::SubIOp::create(k.b, k.loc, rowEnd, k.idx(1));
    auto tokenType = nvgpu::DeviceAsyncTokenType::get(k.b.getContext());
    for (int64_t i = 0; i < shape.rows * perRow / shape.threads(); ++i) {
      auto [row, c] = chunkAt(i, perRow);
      Value aRow = arith::MinUIOp::create(k.b, k.loc, k.add(rowStart, row), last);
      tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
          k.b, k.loc, tokenType, tileA, ValueRange{stage, row, swizzled(row, c)}, source,
          ValueRange{aRow, k.add(k0, k.mul(c, k.idx(run)))}, k.b.getIndexAttr(run), Value(),
          k.b.getUnitAttr()));
    }
  }

  /// cp.async of the weight rows weightRow(0..C) of `expert` (or none) at
  /// depth k0 into stage `stage` of tileW, swizzled.
  void copyWeights(SmallVector<Value> &tokens, Value tileW, Value stage, Value k0, Value expert,
                   function_ref<Value(Value)> weightRow) {
    const int64_t run = chunkElements(), perRow = shape.depth / run;
    auto tokenType = nvgpu::DeviceAsyncTokenType::get(k.b.getContext());
    for (int64_t i = 0; i < shape.cols * perRow / shape.threads(); ++i) {
      auto [row, c] = chunkAt(i, perRow);
      Value n = weightRow(row);
      Value depth = k.add(k0, k.mul(c, k.idx(run)));
      SmallVector<Value> at =
          expert ? SmallVector<Value>{expert, n, depth} : SmallVector<Value>{n, depth};
      tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
          k.b, k.loc, tokenType, tileW, ValueRange{stage, row, swizzled(row, c)}, k.w, at,
          k.b.getIndexAttr(run), Value(), k.b.getUnitAttr()));
    }
  }

  /// The shared-window address of `tile` as an i64.
  Value addressOf(Value tile) {
    Value address = memref::ExtractAlignedPointerAsIndexOp::create(k.b, k.loc, tile);
    return arith::IndexCastUIOp::create(k.b, k.loc, k.b.getI64Type(), address);
  }

  /// The address of the thread's warpgroup's 64 rows in stage 0 of the
  /// staged rows `tileA` (rows of 128 bytes).
  Value rowsAddress(Value tileA) {
    // One op a statement: the IR's order is the same whichever compiler
    // built this (argument evaluation order is unspecified).
    Value offset = k.mul(group, k.idx(64 * shape.stageRowBytes()));
    Value offset64 = arith::IndexCastUIOp::create(k.b, k.loc, k.b.getI64Type(), offset);
    Value base = addressOf(tileA);
    return arith::AddIOp::create(k.b, k.loc, base, offset64);
  }

  /// Descriptor of the operand at `base` + `stage` * `stageBytes` for
  /// wgmma `part` of the stage: its address / 16 (14 bits), leading byte offset 1
  /// (unused by swizzled K-major operands), 1024 bytes between groups of 8
  /// rows, the 128-byte swizzle.
  Value descriptor(Value base, Value stage, int64_t stageBytes, int64_t part) {
    const int64_t fixed = (int64_t(1) << 16) | ((kSwizzleBytes / 16) << 32) | (int64_t(1) << 62);
    Value stage64 = arith::IndexCastUIOp::create(k.b, k.loc, k.b.getI64Type(), stage);
    Value offset = arith::AddIOp::create(
        k.b, k.loc, arith::MulIOp::create(k.b, k.loc, stage64, i64(stageBytes)),
        i64(part * kStepBytes));
    Value address = arith::AddIOp::create(k.b, k.loc, base, offset);
    Value field = arith::AndIOp::create(
        k.b, k.loc, arith::ShRUIOp::create(k.b, k.loc, address, i64(4)), i64(0x3fff));
    return arith::OrIOp::create(k.b, k.loc, field, i64(fixed));
  }

  /// The warpgroup's m64 x C f32 accumulators: per n8 tile j, c0..c3 of
  /// elements 4j..4j+3 as in an m16n8 product of the warp's 16 rows.
  Type accumulators() {
    return LLVM::LLVMStructType::getLiteral(k.b.getContext(),
                                            SmallVector<Type>(shape.cols / 2, k.b.getF32Type()));
  }

  /// acc (+)= A x B: m64nCk16 of bf16, or m64nCk32 of e4m3 (fp8Rows);
  /// without `accumulate` acc's values are not read.
  Value mma(Value acc, Value descA, Value descB, bool accumulate = true) {
    auto mmaShape = NVVM::MMAShapeAttr::get(k.b.getContext(), 64, shape.cols, shape.mmaDepth());
    auto type = shape.fp8Rows ? NVVM::WGMMATypes::e4m3 : NVVM::WGMMATypes::bf16;
    return NVVM::WgmmaMmaAsyncOp::create(
        k.b, k.loc, accumulators(), acc, descA, descB, mmaShape, type, type, NVVM::WGMMATypes::f32,
        accumulate ? NVVM::WGMMAScaleOut::one : NVVM::WGMMAScaleOut::zero, NVVM::WGMMAScaleIn::one,
        NVVM::WGMMAScaleIn::one, NVVM::MMALayout::row, NVVM::MMALayout::col, /*satfinite=*/nullptr);
  }

  /// Where the thread's accumulators go: per n8 tile j, c0 and c1 to row
  /// row0 and c2 and c3 to row0 + 8, columns 8 j + pairCol and the next
  /// (warp w of the block holds rows 16 w..).
  struct Fragment {
    Value row0, row1, pairCol;
  };
  Fragment fragment(Value rowStart) {
    Value warp = arith::DivUIOp::create(k.b, k.loc, tid, k.idx(kWarpSize));
    Value lane = arith::RemUIOp::create(k.b, k.loc, tid, k.idx(kWarpSize));
    Value quad = arith::DivUIOp::create(k.b, k.loc, lane, k.idx(4));
    Value pairCol = k.mul(arith::RemUIOp::create(k.b, k.loc, lane, k.idx(4)), k.idx(2));
    Value row0 = k.add(rowStart, k.add(k.mul(warp, k.idx(16)), quad));
    return {row0, k.add(row0, k.idx(8)), pairCol};
  }

  /// Per n8 tile j of `tiles`, values(j) (its c0..c3) to the output rows
  /// below rowEnd, columns col0 + 8 j...
  void storeTiles(Value rowStart, Value rowEnd, Value col0, int64_t tiles,
                  function_ref<SmallVector<Value>(int64_t)> values) {
    Fragment at = fragment(rowStart);
    for (int64_t j = 0; j < tiles; ++j) {
      SmallVector<Value> c = values(j);
      Value col = k.add(col0, k.add(k.idx(8 * j), at.pairCol));
      k.ifThen(k.lt(at.row0, rowEnd), [&] { k.store2(c[0], c[1], at.row0, col); });
      k.ifThen(k.lt(at.row1, rowEnd), [&] { k.store2(c[2], c[3], at.row1, col); });
    }
  }

  /// The accumulators to rows [rowStart, rowEnd) of the output (the
  /// warpgroup's 64 of them).
  void store(Value acc, Value rowStart, Value rowEnd, Value col0) {
    storeTiles(rowStart, rowEnd, col0, shape.cols / 8, [&](int64_t j) {
      SmallVector<Value> c;
      for (int64_t i = 0; i < 4; ++i)
        c.push_back(LLVM::ExtractValueOp::create(k.b, k.loc, acc, 4 * j + i));
      return c;
    });
  }

  /// silu(gate) * up of the accumulators (n8 tiles j < C/16 the gate's,
  /// j + C/16 the matching up's) to rows [rowStart, rowEnd) and columns
  /// col0.. of the output.
  void storeSwiglu(Value acc, Value rowStart, Value rowEnd, Value col0) {
    const int64_t upTiles = shape.cols / 16;
    storeTiles(rowStart, rowEnd, col0, upTiles, [&](int64_t j) {
      SmallVector<Value> c;
      for (int64_t i = 0; i < 4; ++i) {
        Value gate = LLVM::ExtractValueOp::create(k.b, k.loc, acc, 4 * j + i);
        Value up = LLVM::ExtractValueOp::create(k.b, k.loc, acc, 4 * (j + upTiles) + i);
        c.push_back(swiglu(k.b, k.loc, gate, up));
      }
      return c;
    });
  }
};
} // namespace

void Kernel::wgmmaProducts(BlockShape shape, Value tid, Value rowStart, Value rowEnd, Value col0,
                           Value expert, Value tileA, Value tileW) {
  Warpgroup group{*this, shape, tid};
  auto tokenType = nvgpu::DeviceAsyncTokenType::get(b.getContext());
  auto copyStage = [&](Value stage, Value k0) -> Value {
    SmallVector<Value> tokens;
    group.copyRows(tokens, a, tileA, stage, k0, rowStart, rowEnd);
    group.copyWeights(tokens, tileW, stage, k0, expert, [&](Value row) {
      return fusing ? gateOrUpRow(shape, col0, row) : add(col0, row);
    });
    return nvgpu::DeviceAsyncCreateGroupOp::create(b, loc, tokenType, tokens);
  };

  Value aBase = group.rowsAddress(tileA), wBase = group.addressOf(tileW);
  // With 4 stages, a step's batch of wgmma runs on while the next one is
  // issued (the copies run a step less ahead: 2); with 2 or 3, each batch
  // ends before the next step's barrier (copies 1 or 2 steps ahead). (H100,
  // 64 x 256 blocks, DeepSeek-V3 T = 4096: 3 stages 18.0 ms waited, 20.4 in
  // flight; 4 stages 18.5 waited, 17.5 in flight.)
  const int64_t inFlight = shape.stages >= 4 ? 1 : 0;
  // Copies 2 steps ahead are issued while the batch runs; copies 1 step
  // ahead go first, or they start too late. (H200, DeepSeek-V3 T = 4096,
  // routed GEMMs: 128 x 256 in 3 stages 10.13 ms after, 10.28 before;
  // 64 x 256 in 2 stages 11.42 after, 10.31 before. Qwen3-30B-A3B: 0.96
  // and 1.07 ms.)
  const bool copiesAfter = shape.stages - 1 - inFlight >= 2;
  // At most `inFlight` batches still read their stages when the next
  // step's barrier lets a copy overwrite the stage before them.
  auto wait = [&] { NVVM::WgmmaWaitGroupSyncOp::create(b, loc, inFlight); };
  Value zero = LLVM::ZeroOp::create(b, loc, group.accumulators());
  ValueRange results = pipelinedLoop(
      shape, ValueRange{zero}, copyStage,
      [&](Value, Value stage, int64_t part, SmallVector<Value> &next) {
        if (part == 0)
          NVVM::WgmmaFenceAlignedOp::create(b, loc);
        next[0] = group.mma(next[0], group.descriptor(aBase, stage, shape.rowStageBytes(), part),
                            group.descriptor(wBase, stage, shape.weightStageBytes(), part));
        if (part + 1 < shape.mmaSteps())
          return;
        NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
        if (!copiesAfter)
          wait();
      },
      /*proxyFence=*/true, /*lag=*/inFlight,
      copiesAfter ? FinishStep([&](Value, SmallVector<Value> &) { wait(); }) : nullptr);
  if (inFlight)
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  if (fusing)
    group.storeSwiglu(results[0], rowStart, rowEnd, arith::DivUIOp::create(b, loc, col0, idx(2)));
  else
    group.store(results[0], rowStart, rowEnd, col0);
}

Value Kernel::gateOrUpRow(BlockShape shape, Value col0, Value row) {
  // Block columns [col0, col0 + C) stand for output columns [col0 / 2,
  // col0 / 2 + C / 2): gate rows from col0 / 2, then the up rows N / 2
  // further.
  const int64_t half = shape.cols / 2;
  Value gate = add(arith::DivUIOp::create(b, loc, col0, idx(2)), row);
  Value up = add(gate, idx(cols / 2 - half));
  return arith::SelectOp::create(b, loc, lt(row, idx(half)), gate, up);
}

void Kernel::wgmmaFp8Products(BlockShape shape, Value tid, Value rowStart, Value rowEnd, Value col0,
                              Value expert, Value tileA, Value tileW, Value codes) {
  Warpgroup group{*this, shape, tid};
  const int64_t codeChunks = shape.depth / 16; // 16-byte chunks of a row of codes
  auto tokenType = nvgpu::DeviceAsyncTokenType::get(b.getContext());
  auto copyStage = [&](Value stage, Value k0) -> Value {
    SmallVector<Value> tokens;
    group.copyRows(tokens, a, tileA, stage, k0, rowStart, rowEnd);
    for (int64_t i = 0; i < shape.cols * codeChunks / shape.threads(); ++i) {
      auto [row, c] = group.chunkAt(i, codeChunks);
      Value k = mul(c, idx(16));
      tokens.push_back(
          nvgpu::DeviceAsyncCopyOp::create(b, loc, tokenType, codes, ValueRange{stage, row, k}, w,
                                           ValueRange{expert, add(col0, row), add(k0, k)},
                                           b.getIndexAttr(16), Value(), b.getUnitAttr()));
    }
    return nvgpu::DeviceAsyncCreateGroupOp::create(b, loc, tokenType, tokens);
  };

  // Each step's codes to the bf16 tile, 8 a run (16 bytes of bf16), the
  // tile swizzled like a stage.
  auto decodeStage = [&](Value stage) {
    const int64_t perRow = shape.depth / 8;
    auto run = VectorType::get({4}, b.getI32Type());
    for (int64_t i = 0; i < shape.cols * perRow / shape.threads(); ++i) {
      auto [row, c] = group.chunkAt(i, perRow);
      SmallVector<Value> regs = loadCodes8(codes, {stage, row, mul(c, idx(8))});
      Value bits = vector::FromElementsOp::create(b, loc, run, regs);
      Value values = vector::BitCastOp::create(b, loc, VectorType::get({8}, b.getBF16Type()), bits);
      auto store = vector::StoreOp::create(b, loc, values, tileW,
                                           ValueRange{idx(0), row, group.swizzled(row, c)});
      store.setAlignment(uint64_t(16));
    }
    NVVM::FenceProxyOp::create(
        b, loc, NVVM::ProxyKind::async_shared,
        NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
    gpu::BarrierOp::create(b, loc);
  };

  Value aBase = group.rowsAddress(tileA), wBase = group.addressOf(tileW);
  const int64_t stepsPerScale = scaleDepth / shape.depth;
  Type accType = group.accumulators();
  Value zero = LLVM::ZeroOp::create(b, loc, accType);
  Value scaleRow = arith::DivUIOp::create(b, loc, col0, idx(scaleRows));
  // results: the total, then the scale block's sum.
  ValueRange results = pipelinedLoop(
      shape, ValueRange{zero, zero}, copyStage,
      [&](Value step, Value stage, int64_t part, SmallVector<Value> &next) {
        if (part == 0) {
          decodeStage(stage);
          NVVM::WgmmaFenceAlignedOp::create(b, loc);
        }
        next[1] = group.mma(next[1], group.descriptor(aBase, stage, shape.rowStageBytes(), part),
                            group.descriptor(wBase, idx(0), 0, part));
        if (part + 1 < shape.mmaSteps())
          return;
        // The bf16 tile is read before the next step decodes over it.
        NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
        NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
        Value blockEnd = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::eq,
            arith::RemUIOp::create(b, loc, add(step, idx(1)), idx(stepsPerScale)), idx(0));
        auto join = scf::IfOp::create(b, loc, TypeRange{accType, accType}, blockEnd,
                                      /*withElseRegion=*/true);
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(join.thenBlock());
          Value scaleCol = arith::DivUIOp::create(b, loc, step, idx(stepsPerScale));
          Value scale =
              memref::LoadOp::create(b, loc, wScales, ValueRange{expert, scaleRow, scaleCol});
          Value total = next[0];
          for (int64_t i = 0; i < shape.cols / 2; ++i) {
            Value sum = LLVM::ExtractValueOp::create(b, loc, next[1], i);
            Value old = LLVM::ExtractValueOp::create(b, loc, total, i);
            Value scaled =
                arith::AddFOp::create(b, loc, old, arith::MulFOp::create(b, loc, sum, scale));
            total = LLVM::InsertValueOp::create(b, loc, total, scaled, i);
          }
          scf::YieldOp::create(b, loc, ValueRange{total, zero});
          b.setInsertionPointToStart(join.elseBlock());
          scf::YieldOp::create(b, loc, ValueRange{next[0], next[1]});
        }
        next[0] = join.getResult(0);
        next[1] = join.getResult(1);
      },
      /*proxyFence=*/true);
  group.store(results[0], rowStart, rowEnd, col0);
}

void Kernel::wgmmaFp8RowsProducts(BlockShape shape, Value tid, Value rowStart, Value rowEnd,
                                  Value col0, Value expert, Value tileA, Value tileW) {
  Warpgroup group{*this, shape, tid};
  auto tokenType = nvgpu::DeviceAsyncTokenType::get(b.getContext());
  auto copyStage = [&](Value stage, Value k0) -> Value {
    SmallVector<Value> tokens;
    group.copyRows(tokens, rowCodes, tileA, stage, k0, rowStart, rowEnd);
    group.copyWeights(tokens, tileW, stage, k0, expert, [&](Value row) { return add(col0, row); });
    return nvgpu::DeviceAsyncCreateGroupOp::create(b, loc, tokenType, tokens);
  };

  Value aBase = group.rowsAddress(tileA), wBase = group.addressOf(tileW);
  Warpgroup::Fragment at = group.fragment(rowStart);
  Value last = arith::SubIOp::create(b, loc, rowEnd, idx(1));
  Value row0 = arith::MinUIOp::create(b, loc, at.row0, last);
  Value row1 = arith::MinUIOp::create(b, loc, at.row1, last);
  Value scaleRow = arith::DivUIOp::create(b, loc, col0, idx(scaleRows));
  // A step is 128 deep; a row scale group one (128), two or four (32, as
  // UE8M0's) of its groups of products.
  const int64_t partsPerScale = rowScaleGroup() / shape.mmaDepth();
  const int64_t scalesPerStep = shape.mmaSteps() / partsPerScale;
  // The group's scales, loaded as its products are issued: the thread's
  // two rows' and the step's weight block's.
  Value rowScale0, rowScale1, weightScale;
  // Each group's products, once done, join the total: c0, c1 of each n8
  // tile are row0's, c2, c3 row1's.
  auto join = [&](Value, SmallVector<Value> &next) {
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
    Value factor0 = arith::MulFOp::create(b, loc, rowScale0, weightScale);
    Value factor1 = arith::MulFOp::create(b, loc, rowScale1, weightScale);
    Value total = next[0];
    for (int64_t i = 0; i < shape.cols / 2; ++i) {
      Value sum = LLVM::ExtractValueOp::create(b, loc, next[1], i);
      Value old = LLVM::ExtractValueOp::create(b, loc, total, i);
      Value joined = math::FmaOp::create(b, loc, sum, i % 4 < 2 ? factor0 : factor1, old);
      total = LLVM::InsertValueOp::create(b, loc, total, joined, i);
    }
    next[0] = total;
  };
  // As for bf16: with 3 or more stages the copies are issued while the
  // step's last products run.
  const bool copiesAfter = shape.stages >= 3;
  Value zero = LLVM::ZeroOp::create(b, loc, group.accumulators());
  // results: the total, then the group's products (overwritten each group).
  ValueRange results = pipelinedLoop(
      shape, ValueRange{zero, zero}, copyStage,
      [&](Value step, Value stage, int64_t part, SmallVector<Value> &next) {
        const bool first = part % partsPerScale == 0;
        if (first) {
          Value scaleCol = scalesPerStep == 1
                               ? step
                               : add(mul(step, idx(scalesPerStep)), idx(part / partsPerScale));
          rowScale0 = load(rowScales, {row0, scaleCol});
          rowScale1 = load(rowScales, {row1, scaleCol});
        }
        if (part == 0) {
          Value scaleCol =
              arith::DivUIOp::create(b, loc, mul(step, idx(shape.depth)), idx(scaleDepth));
          weightScale = load(wScales, {expert, scaleRow, scaleCol});
        }
        // Before the group's products write the registers the last join read.
        if (first)
          NVVM::WgmmaFenceAlignedOp::create(b, loc);
        next[1] = group.mma(next[1], group.descriptor(aBase, stage, shape.rowStageBytes(), part),
                            group.descriptor(wBase, stage, shape.weightStageBytes(), part),
                            /*accumulate=*/!first);
        if ((part + 1) % partsPerScale != 0)
          return;
        NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
        if (part + 1 < shape.mmaSteps() || !copiesAfter)
          join(step, next);
      },
      /*proxyFence=*/true, /*lag=*/0, copiesAfter ? FinishStep(join) : nullptr);
  group.store(results[0], rowStart, rowEnd, col0);
}

} // namespace mlir::moe::gemm
