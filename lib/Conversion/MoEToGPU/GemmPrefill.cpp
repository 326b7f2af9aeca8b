//===- GemmPrefill.cpp - the prefill forms of the tensor-core GEMM ----------===//
//
// Many rows per expert: the block form (several experts: blocks of up to
// 64 rows of one expert by 128 columns, from a table of blocks), the wide
// one (one expert or none: 128 rows by 64 columns), both pipelined through
// workgroup memory (on sm_90a both may take wgmma blocks of 64 rows by C
// columns instead: GemmWgmma.cpp); and the narrow form (4 tiles of 16 rows
// by 64 columns, staged where they share an expert) for shapes the block
// form does not take.
//
//===----------------------------------------------------------------------===//
#include "GemmKernel.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;

namespace mlir::moe::gemm {

/// The two-stage pipeline both staged forms share: the first copy, then
/// per 32 of depth the next stage's copy, a wait for this one, a barrier,
/// `body` for each k16 half on this stage, and a barrier before the stage is
/// copied over; the last copy lands before the results return.
ValueRange Kernel::stagedLoop(ValueRange init, function_ref<Value(Value, Value)> copyStage,
                              function_ref<void(Value, int64_t, SmallVector<Value> &)> body) {
  const int64_t steps = depth / kDepthStep;
  Value firstCopy = copyStage(idx(0), idx(0));
  auto loop = scf::ForOp::create(
      b, loc, idx(0), idx(steps), idx(1), init,
      [&](OpBuilder &nb, Location, Value step, ValueRange acc) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
        Value stage = arith::RemUIOp::create(b, loc, step, idx(2));
        Value other = arith::SubIOp::create(b, loc, idx(1), stage);
        // The next stage's copy (the last iteration repeats the last
        // one, into the stage nobody reads any more).
        Value nextK = arith::MinUIOp::create(b, loc, mul(add(step, idx(1)), idx(kDepthStep)),
                                             idx(depth - kDepthStep));
        Value pending = copyStage(other, nextK);
        nvgpu::DeviceAsyncWaitOp::create(b, loc, pending, b.getI32IntegerAttr(1));
        gpu::BarrierOp::create(b, loc);
        SmallVector<Value> next(acc.begin(), acc.end());
        for (int64_t half = 0; half < kDepthStep / 16; ++half)
          body(stage, half, next);
        // Every warp is done with this stage before it is copied over.
        gpu::BarrierOp::create(b, loc);
        scf::YieldOp::create(b, loc, next);
      });
  // The last iteration's copy lands before the block exits.
  nvgpu::DeviceAsyncWaitOp::create(b, loc, firstCopy, b.getI32IntegerAttr(0));
  return loop.getResults();
}

/// An S-stage cp.async pipeline over steps of the shape's depth, copies
/// running A = S - 1 - lag steps ahead: the copies of the first A steps,
/// then per step a wait for its copy (A - 1 younger ones may stay in
/// flight), a barrier (every warp is done with step - 1 - lag, whose stage
/// the next copy overwrites), the copy of step + A, and `body` for each
/// product's part (shape.mmaDepth() deep) of this step's stage. Steps past the end copy the last
/// one again into stages nobody reads any more; every copy lands before the results return.
ValueRange
Kernel::pipelinedLoop(BlockShape shape, ValueRange init,
                      function_ref<Value(Value, Value)> copyStage,
                      function_ref<void(Value, Value, int64_t, SmallVector<Value> &)> body,
                      bool proxyFence, int64_t lag, FinishStep finish) {
  const int64_t stages = shape.stages, steps = depth / shape.depth;
  const int64_t ahead = stages - 1 - lag;
  assert(ahead >= 1 && "a pipeline copies at least one step ahead");
  auto depthOf = [&](int64_t step) { return idx(std::min(step, steps - 1) * shape.depth); };
  Value lastCopy;
  for (int64_t s = 0; s < ahead; ++s)
    lastCopy = copyStage(idx(s), depthOf(s));
  auto loop = scf::ForOp::create(
      b, loc, idx(0), idx(steps), idx(1), init,
      [&](OpBuilder &nb, Location, Value step, ValueRange acc) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
        nvgpu::DeviceAsyncWaitOp::create(b, loc, lastCopy, b.getI32IntegerAttr(ahead - 1));
        if (proxyFence)
          NVVM::FenceProxyOp::create(
              b, loc, NVVM::ProxyKind::async_shared,
              NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
        gpu::BarrierOp::create(b, loc);
        auto copyNext = [&] {
          Value copyStep = add(step, idx(ahead));
          Value nextK =
              mul(arith::MinUIOp::create(b, loc, copyStep, idx(steps - 1)), idx(shape.depth));
          copyStage(arith::RemUIOp::create(b, loc, copyStep, idx(stages)), nextK);
        };
        if (!finish)
          copyNext();
        Value stage = arith::RemUIOp::create(b, loc, step, idx(stages));
        SmallVector<Value> next(acc.begin(), acc.end());
        for (int64_t part = 0; part < shape.mmaSteps(); ++part)
          body(step, stage, part, next);
        if (finish) {
          copyNext();
          finish(step, next);
        }
        scf::YieldOp::create(b, loc, next);
      });
  nvgpu::DeviceAsyncWaitOp::create(b, loc, lastCopy, b.getI32IntegerAttr(0));
  return loop.getResults();
}

/// Workgroup memory for `shape`'s stages of `rows` rows (bf16, or FP8
/// codes).
static MemRefType stageType(OpBuilder &b, BlockShape shape, int64_t rows) {
  auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  Type element = shape.fp8Rows ? Type(b.getI8Type()) : Type(b.getBF16Type());
  return MemRefType::get({shape.stages, rows, shape.stageRow()}, element,
                         MemRefLayoutAttrInterface{}, workgroup);
}

void Kernel::launchStaged(BlockShape shape, Value gridX, Value gridY,
                          function_ref<void(gpu::LaunchOp, ValueRange)> body) {
  Value one = idx(1);
  MemRefType aType = stageType(b, shape, shape.rows), wType = stageType(b, shape, shape.cols);
  if (shape.fp8 && !shape.fp8Rows) // one tile of decoded weights
    wType = MemRefType::get({1, shape.cols, shape.depth}, b.getBF16Type(),
                            MemRefLayoutAttrInterface{}, aType.getMemorySpace());
  const bool dynamic = shape.wgmma || shape.sharedBytes() > kStaticSharedBytes;
  Value bytes = dynamic
                    ? arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(shape.sharedBytes()))
                    : Value();
  auto launch =
      gpu::LaunchOp::create(b, loc, gridX, gridY, one, idx(shape.threads()), one, one, bytes,
                            nullptr, {}, dynamic ? TypeRange{} : TypeRange{aType, wType});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());
  SmallVector<Value> tiles;
  if (dynamic) {
    auto raw = MemRefType::get({ShapedType::kDynamic}, b.getI8Type(), MemRefLayoutAttrInterface{},
                               aType.getMemorySpace());
    Value memory = gpu::DynamicSharedMemoryOp::create(b, loc, raw);
    // wgmma's swizzle is of address bits: its stages start at a multiple
    // of kSwizzleBytes in the shared window.
    Value start = idx(0);
    if (shape.wgmma) {
      Value address = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memory);
      Value past = arith::RemUIOp::create(b, loc, address, idx(kSwizzleBytes));
      start = arith::RemUIOp::create(
          b, loc, arith::SubIOp::create(b, loc, idx(kSwizzleBytes), past), idx(kSwizzleBytes));
    }
    int64_t aBytes = shape.stages * shape.rows * shape.stageRowBytes();
    tiles.push_back(memref::ViewOp::create(b, loc, aType, memory, start, ValueRange{}));
    tiles.push_back(
        memref::ViewOp::create(b, loc, wType, memory, add(start, idx(aBytes)), ValueRange{}));
    if (shape.fp8 && !shape.fp8Rows) {
      auto codes = MemRefType::get({shape.stages, shape.cols, shape.depth}, b.getI8Type(),
                                   MemRefLayoutAttrInterface{}, aType.getMemorySpace());
      int64_t wBytes = shape.cols * shape.depth * 2;
      tiles.push_back(memref::ViewOp::create(b, loc, codes, memory,
                                             add(start, idx(aBytes + wBytes)), ValueRange{}));
    }
  } else {
    tiles.append(launch.getWorkgroupAttributions().begin(),
                 launch.getWorkgroupAttributions().end());
  }
  body(launch, tiles);
  gpu::TerminatorOp::create(b, loc);
}

/// The wide prefill form of a GEMM of one expert or none: a block of 4
/// warps computes rows 128 y.. (up to 128) by 64 columns, warp (m, n) of
/// 2 x 2 the 64 x 32 at (64 m, 32 n), its rows and weight rows pipelined
/// through shared memory (blockProducts); with wgmma, the block form's
/// shape (wgmmaProducts).
void Kernel::launchWide() {
  const BlockShape shape = wideShape;
  Value rowBlocks = arith::CeilDivUIOp::create(b, loc, rows, idx(shape.rows));
  launchStaged(shape, idx(cols / shape.cols), rowBlocks,
               [&](gpu::LaunchOp launch, ValueRange tiles) {
                 Value col0 = mul(launch.getBlockIds().x, idx(shape.cols));
                 Value rowStart = mul(launch.getBlockIds().y, idx(shape.rows));
                 Value rowEnd =
                     arith::MinUIOp::create(b, loc, add(rowStart, idx(shape.rows)), rows);
                 blockFormProducts(shape, launch.getThreadIds().x, rowStart, rowEnd, col0,
                                   grouped() ? idx(0) : Value(), tiles);
               });
}

void Kernel::blockFormProducts(BlockShape shape, Value tid, Value rowStart, Value rowEnd,
                               Value col0, Value expert, ValueRange tiles) {
  if (shape.fp8Rows)
    wgmmaFp8RowsProducts(shape, tid, rowStart, rowEnd, col0, expert, tiles[0], tiles[1]);
  else if (shape.fp8)
    wgmmaFp8Products(shape, tid, rowStart, rowEnd, col0, expert, tiles[0], tiles[1], tiles[2]);
  else if (shape.wgmma)
    wgmmaProducts(shape, tid, rowStart, rowEnd, col0, expert, tiles[0], tiles[1]);
  else
    blockProducts(shape, tid, rowStart, rowEnd, col0, expert, tiles[0], tiles[1]);
}

std::optional<std::string> checkBlockShape(BlockShape shape) {
  if (shape.wgmma) {
    if (shape.rows != 64 && shape.rows != 128)
      return std::string("wgmma blocks have 64 or 128 rows (one or two warpgroups' m64)");
    if (shape.cols != 64 && shape.cols != 128 && shape.cols != 256)
      return std::string("wgmma blocks have 64, 128 or 256 columns");
    if (shape.depth != 64)
      return std::string("wgmma stages are 64 deep (rows of 128 bytes, the swizzle's)");
    if (shape.sharedBytes() > kMaxSharedBytesSm90)
      return llvm::formatv("{0} stages of 64 + {1} rows take {2} bytes of shared memory, more "
                           "than {3}",
                           shape.stages, shape.cols, shape.sharedBytes(), kMaxSharedBytesSm90)
          .str();
    return std::nullopt;
  }
  auto allowed = [](int64_t n) { return n == 32 || n == 64 || n == 128; };
  if (!allowed(shape.rows) || !allowed(shape.cols))
    return "rows and columns must be 32, 64 or 128";
  // 4 f32 per m16n8 product, (rows / 32) x (cols / 16) of them a warp.
  if (shape.rows * shape.cols > 64 * 128)
    return "at most 64 x 128 or 128 x 64 outputs a block (64 accumulators a thread)";
  if (shape.sharedBytes() > kMaxSharedBytes)
    return llvm::formatv("{0} stages of {1} + {2} rows by {3} take {4} bytes of shared "
                         "memory, more than {5}",
                         shape.stages, shape.rows, shape.cols, shape.depth, shape.sharedBytes(),
                         kMaxSharedBytes)
        .str();
  return std::nullopt;
}

BlockShape narrowedToDivide(BlockShape shape, int64_t cols) {
  const int64_t narrowest = shape.wgmma ? 64 : 32;
  while (shape.cols > narrowest && cols % shape.cols != 0)
    shape.cols /= 2;
  return shape;
}

BlockShape wideShapeOf(int64_t stages, int64_t depth) {
  BlockShape shape{kWideRows, kWideCols, stages, depth};
  while (shape.stages > 2 && shape.sharedBytes() > kMaxSharedBytes)
    --shape.stages;
  return shape;
}

void Kernel::allocateBlockTable() {
  auto vector = MemRefType::get({ShapedType::kDynamic}, b.getI32Type());
  tableSize = tableEntries();
  blockRow = memref::AllocOp::create(b, loc, vector, ValueRange{tableSize});
  blockExpert = memref::AllocOp::create(b, loc, vector, ValueRange{tableSize});
  blockCount = memref::AllocOp::create(b, loc, MemRefType::get({1}, b.getI32Type()));
}

/// The block form: a small kernel numbers the blocks of each expert's rows
/// (ceil(rows / R) each, an exclusive scan over the experts in workgroup
/// memory) into the table; then a block per table entry and C columns
/// computes up to R rows of one expert, and the blocks past the table's
/// write zeros to the rows past the experts' (those of no expert).
void Kernel::launchBlocks() {
  const BlockShape shape = blockShape;
  Value one = idx(1);
  auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  auto table = gpu::LaunchOp::create(
      b, loc, one, one, one, idx((experts + kWarpSize - 1) / kWarpSize * kWarpSize), one, one,
      nullptr, nullptr, {},
      TypeRange{
          MemRefType::get({experts}, b.getI32Type(), MemRefLayoutAttrInterface{}, workgroup)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&table.getBody().front());
    Value e = table.getThreadIds().x;
    Value counts = table.getWorkgroupAttributions()[0];
    Value active = lt(e, idx(experts));
    Value safe = arith::SelectOp::create(b, loc, active, e, idx(0));
    Value begin = load(offsets, {safe});
    Value end = load(offsets, {add(safe, one)});
    Value blocks = arith::CeilDivUIOp::create(b, loc, arith::SubIOp::create(b, loc, end, begin),
                                              i32(shape.rows));
    ifThen(active, [&] { store(blocks, counts, {e}); });
    gpu::BarrierOp::create(b, loc);
    inclusiveScan(counts, e, active, experts);
    ifThen(active, [&] {
      Value first = toIndex(arith::SubIOp::create(b, loc, load(counts, {e}), blocks));
      forEach(idx(0), toIndex(blocks), one, [&](Value j) {
        Value at = add(first, j);
        store(arith::AddIOp::create(b, loc, begin, toI32(mul(j, idx(shape.rows)))), blockRow, {at});
        store(toI32(e), blockExpert, {at});
      });
    });
    ifThen(cmp(arith::CmpIPredicate::eq, e, idx(0)),
           [&] { store(load(counts, {idx(experts - 1)}), blockCount, {idx(0)}); });
    gpu::TerminatorOp::create(b, loc);
  }

  launchStaged(
      shape, idx(cols / shape.cols), tableSize, [&](gpu::LaunchOp launch, ValueRange tiles) {
        Value y = launch.getBlockIds().y;
        Value tid = launch.getThreadIds().x;
        Value col0 = mul(launch.getBlockIds().x, idx(shape.cols));
        Value count = toIndex(load(blockCount, {idx(0)}));
        ifThenElse(
            lt(y, count),
            [&] {
              Value rowStart = toIndex(load(blockRow, {y}));
              Value expert = toIndex(load(blockExpert, {y}));
              Value expertEnd = loadIndex(offsets, add(expert, one));
              Value rowEnd =
                  arith::MinUIOp::create(b, loc, add(rowStart, idx(shape.rows)), expertEnd);
              blockFormProducts(shape, tid, rowStart, rowEnd, col0, expert, tiles);
            },
            [&] {
              Value used = loadIndex(offsets, idx(experts));
              Value start =
                  add(used, mul(arith::SubIOp::create(b, loc, y, count), idx(shape.rows)));
              // Fused, the block's columns are half as many, from col0 / 2.
              Value firstCol = fusing ? arith::DivUIOp::create(b, loc, col0, idx(2)) : col0;
              const int64_t width = fusing ? shape.cols / 2 : shape.cols;
              for (int64_t tile = 0; tile < shape.rows; tile += kTileRows)
                zeroRows(tid, shape.threads(), add(start, idx(tile)), firstCol, width);
            });
      });
}

/// A block's products of rows [rowStart, rowEnd) (of `expert`, or none)
/// with columns [col0, col0 + shape.cols); rows past rowEnd read its last
/// row and are not stored. Warp (m, n) of 2 x 2 computes the
/// shape.rows / 2 x shape.cols / 2 outputs at (m, n) times that.
void Kernel::blockProducts(BlockShape shape, Value tid, Value rowStart, Value rowEnd, Value col0,
                           Value expert, Value tileA, Value tileW) {
  const int64_t threads = kWideWarps * kWarpSize;
  Value warp = arith::DivUIOp::create(b, loc, tid, idx(kWarpSize));
  Value lane = arith::RemUIOp::create(b, loc, tid, idx(kWarpSize));
  Value last = arith::SubIOp::create(b, loc, rowEnd, idx(1));
  auto tokenType = nvgpu::DeviceAsyncTokenType::get(b.getContext());
  // depth / 8 runs of 16 bytes of each of the block's rows and weight rows.
  const int64_t runs = shape.depth / 8;
  auto copyStage = [&](Value stage, Value k0) -> Value {
    SmallVector<Value> tokens;
    auto at = [&](int64_t i) -> std::pair<Value, Value> {
      Value chunk = add(tid, idx(threads * i));
      return {arith::DivUIOp::create(b, loc, chunk, idx(runs)),
              mul(arith::RemUIOp::create(b, loc, chunk, idx(runs)), idx(8))};
    };
    for (int64_t i = 0; i < shape.rows * runs / threads; ++i) {
      auto [row, k] = at(i);
      Value aRow = arith::MinUIOp::create(b, loc, add(rowStart, row), last);
      tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
          b, loc, tokenType, tileA, ValueRange{stage, row, k}, a, ValueRange{aRow, add(k0, k)},
          b.getIndexAttr(8), Value(), b.getUnitAttr()));
    }
    for (int64_t i = 0; i < shape.cols * runs / threads; ++i) {
      auto [row, k] = at(i);
      Value n = add(col0, row);
      SmallVector<Value> wAt = expert ? SmallVector<Value>{expert, n, add(k0, k)}
                                      : SmallVector<Value>{n, add(k0, k)};
      tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
          b, loc, tokenType, tileW, ValueRange{stage, row, k}, w, wAt, b.getIndexAttr(8),
          Value(), b.getUnitAttr()));
    }
    return nvgpu::DeviceAsyncCreateGroupOp::create(b, loc, tokenType, tokens);
  };
  auto fragments = VectorType::get({4, 2}, b.getBF16Type());
  const int64_t warpRows = shape.rows / 2, warpCols = shape.cols / 2;
  Value warpRow = mul(arith::DivUIOp::create(b, loc, warp, idx(2)), idx(warpRows));
  Value warpCol = mul(arith::RemUIOp::create(b, loc, warp, idx(2)), idx(warpCols));
  // ldmatrix x4 rows: A, lanes 0-15 rows 0-15 at k, 16-31 at k + 8; B,
  // lanes 8m..8m+7 rows (m / 2) * 8 + 0..7 of the tile pair at k + (m % 2) * 8.
  Value aRowInTile = add(warpRow, arith::RemUIOp::create(b, loc, lane, idx(16)));
  Value aK = mul(arith::DivUIOp::create(b, loc, lane, idx(16)), idx(8));
  Value matrix = arith::DivUIOp::create(b, loc, lane, idx(8));
  Value bRow = add(warpCol, add(mul(arith::DivUIOp::create(b, loc, matrix, idx(2)), idx(8)),
                                arith::RemUIOp::create(b, loc, lane, idx(8))));
  Value bK = mul(arith::RemUIOp::create(b, loc, matrix, idx(2)), idx(8));

  const int64_t rowTiles = warpRows / 16, colTiles = warpCols / 8; // of 16 rows, of 8 columns
  Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
  SmallVector<Value> init(4 * rowTiles * colTiles, zero);
  ValueRange results = pipelinedLoop(
      shape, init, copyStage, [&](Value, Value stage, int64_t half, SmallVector<Value> &next) {
        // The B fragments first, then one A fragment at a time: fewer
        // registers live than with every fragment loaded.
        SmallVector<SmallVector<Value>> bRegs;
        for (int64_t pair = 0; pair < colTiles / 2; ++pair) {
          Value bFrag = nvgpu::LdMatrixOp::create(
              b, loc, fragments, tileW,
              ValueRange{stage, add(idx(16 * pair), bRow), add(idx(16 * half), bK)}, false, 4);
          for (int64_t t = 0; t < 2; ++t)
            bRegs.push_back({asI32(bFrag, 2 * t), asI32(bFrag, 2 * t + 1)});
        }
        for (int64_t i = 0; i < rowTiles; ++i) {
          Value aFrag = nvgpu::LdMatrixOp::create(
              b, loc, fragments, tileA,
              ValueRange{stage, add(aRowInTile, idx(16 * i)), add(idx(16 * half), aK)}, false, 4);
          SmallVector<Value> aRegs = {asI32(aFrag, 0), asI32(aFrag, 1), asI32(aFrag, 2),
                                      asI32(aFrag, 3)};
          for (int64_t j = 0; j < colTiles; ++j)
            mma(next, i * colTiles + j, aRegs, bRegs[j]);
        }
      });
  Value group = arith::DivUIOp::create(b, loc, lane, idx(4));
  Value pairCol = mul(arith::RemUIOp::create(b, loc, lane, idx(4)), idx(2));
  for (int64_t i = 0; i < rowTiles; ++i)
    for (int64_t j = 0; j < colTiles; ++j) {
      Value row0 = add(rowStart, add(warpRow, add(idx(16 * i), group)));
      Value row1 = add(row0, idx(8));
      Value col = add(col0, add(warpCol, add(idx(8 * j), pairCol)));
      ValueRange tile = results.slice(4 * (i * colTiles + j), 4);
      ifThen(lt(row0, rowEnd), [&] { store2(tile[0], tile[1], row0, col); });
      ifThen(lt(row1, rowEnd), [&] { store2(tile[2], tile[3], row1, col); });
    }
}

/// The narrow prefill form: a block's 4 warps take 4 consecutive tiles
/// of 16 rows of the same 32 or 64 columns. With 64 columns, where the 4
/// tiles have one expert, each 32 of depth of the block's rows and weight
/// rows is staged through workgroup memory (cp.async, two stages) and read
/// by ldmatrix; elsewhere each warp loads its own fragments.
void Kernel::launch() {
  int64_t threads = kWarps * kWarpSize;
  int64_t blockCols = cols % 64 == 0 ? 64 : 32;
  int64_t blockTiles = kWarps;
  Value one = idx(1);
  // ceil(rows / (16 * tiles per block)) blocks of rows.
  int64_t blockRows = kTileRows * blockTiles;
  Value rowBlocks = arith::DivUIOp::create(b, loc, add(rows, idx(blockRows - 1)), idx(blockRows));
  auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  SmallVector<Type> shared;
  // Prefill with 64 columns: two stages of the block's 64 rows and 64
  // weight rows by 32 of depth, rows padded to 40 elements (80 bytes) so
  // that ldmatrix's eight row addresses fall in distinct banks.
  const bool staged = blockCols == 64;
  if (staged)
    shared.append(2, MemRefType::get({2, 64, kStageRow}, b.getBF16Type(),
                                     MemRefLayoutAttrInterface{}, workgroup));
  auto launch = gpu::LaunchOp::create(b, loc, idx(cols / blockCols), rowBlocks, one,
                                      idx(threads), one, one, nullptr, nullptr, {}, shared);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());
  Value tid = launch.getThreadIds().x;
  Value warp = arith::DivUIOp::create(b, loc, tid, idx(kWarpSize));
  Value lane = arith::RemUIOp::create(b, loc, tid, idx(kWarpSize));
  Value blockRow0 = mul(launch.getBlockIds().y, idx(blockRows));
  Value rowStart = add(blockRow0, mul(warp, idx(kTileRows)));
  Value col0 = mul(launch.getBlockIds().x, idx(blockCols));
  int64_t nTiles = blockCols / 8;
  auto compute = [&](Value expert) { products(lane, rowStart, col0, nTiles, expert); };
  auto computeStaged = [&](Value expert) {
    stagedProducts(tid, warp, lane, blockRow0, rowStart, col0, expert,
                   launch.getWorkgroupAttributions()[0], launch.getWorkgroupAttributions()[1]);
  };
  if (!grouped()) {
    staged ? computeStaged(Value()) : compute(Value());
    gpu::TerminatorOp::create(b, loc);
    return;
  }
  Value used = loadIndex(offsets, idx(experts));
  if (staged) {
    // The block's four tiles share one expert (every tile of a
    // prefill-sized expert but its last ones): shared-memory stages. Else
    // each warp its own tile below. The branch is the same for the block.
    Value first = memref::LoadOp::create(b, loc, rowExpert, ValueRange{blockRow0});
    Value lastTile = add(blockRow0, idx(kTileRows * (kWarps - 1)));
    Value same = arith::AndIOp::create(
        b, loc, lt(lastTile, used),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, first,
                              arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0))));
    auto shareOne = scf::IfOp::create(b, loc, same, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard inner(b);
      b.setInsertionPointToStart(shareOne.thenBlock());
      // Tiles of one expert are contiguous: the first and last agree.
      Value lastExpert = memref::LoadOp::create(b, loc, rowExpert, ValueRange{lastTile});
      auto check = scf::IfOp::create(
          b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, first, lastExpert),
          /*withElseRegion=*/true);
      b.setInsertionPointToStart(check.thenBlock());
      computeStaged(arith::IndexCastOp::create(b, loc, b.getIndexType(), first));
      b.setInsertionPointToStart(check.elseBlock());
      perWarp(lane, rowStart, col0, blockCols, used, compute);
      b.setInsertionPointToStart(shareOne.elseBlock());
      perWarp(lane, rowStart, col0, blockCols, used, compute);
    }
    gpu::TerminatorOp::create(b, loc);
    return;
  }
  perWarp(lane, rowStart, col0, blockCols, used, compute);
  gpu::TerminatorOp::create(b, loc);
}

/// Each warp its own tile.
void Kernel::perWarp(Value lane, Value rowStart, Value col0, int64_t blockCols, Value used,
             function_ref<void(Value)> compute) {
  tileOfExpert(rowStart, used, [&] { zeroRows(lane, kWarpSize, rowStart, col0, blockCols); },
               compute);
}

/// The products of the tile at rowStart with its expert's weights, or
/// zeros past the used rows or for a tile of no expert.
void Kernel::tileOfExpert(Value rowStart, Value used, function_ref<void()> zero,
                  function_ref<void(Value)> compute) {
  ifThenElse(
      lt(rowStart, used),
      [&] {
        Value expertI32 = memref::LoadOp::create(b, loc, rowExpert, ValueRange{rowStart});
        Value valid = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::sge, expertI32,
            arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0)));
        ifThenElse(
            valid,
            [&] { compute(arith::IndexCastOp::create(b, loc, b.getIndexType(), expertI32)); },
            zero);
      },
      zero);
}

/// Prefill, the block's 64 rows of one expert by 64 columns: per 32 of
/// depth, the 64 x 32 rows of `a` and of the weights go to shared memory
/// (cp.async, two 16-byte chunks of each per thread) while the warps
/// multiply the other stage; fragments come from ldmatrix (x4: an A
/// fragment, or the B fragments of two n8 tiles).
void Kernel::stagedProducts(Value tid, Value warp, Value lane, Value blockRow0, Value rowStart,
                    Value col0, Value expert, Value tileA, Value tileW) {
  Value last = arith::SubIOp::create(b, loc, rows, idx(1));
  auto tokenType = nvgpu::DeviceAsyncTokenType::get(b.getContext());
  auto copyStage = [&](Value stage, Value k0) -> Value {
    SmallVector<Value> tokens;
    for (int64_t i = 0; i < 2; ++i) {
      Value chunk = add(tid, idx(kWarps * kWarpSize * i));
      Value row = arith::DivUIOp::create(b, loc, chunk, idx(4));
      Value k = mul(arith::RemUIOp::create(b, loc, chunk, idx(4)), idx(8));
      // Rows past the end read the last row; their products are not stored.
      Value aRow = arith::MinUIOp::create(b, loc, add(blockRow0, row), last);
      tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
          b, loc, tokenType, tileA, ValueRange{stage, row, k}, a, ValueRange{aRow, add(k0, k)},
          b.getIndexAttr(8), Value(), b.getUnitAttr()));
      Value n = add(col0, row);
      SmallVector<Value> wAt = expert ? SmallVector<Value>{expert, n, add(k0, k)}
                                      : SmallVector<Value>{n, add(k0, k)};
      tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
          b, loc, tokenType, tileW, ValueRange{stage, row, k}, w, wAt, b.getIndexAttr(8),
          Value(), b.getUnitAttr()));
    }
    return nvgpu::DeviceAsyncCreateGroupOp::create(b, loc, tokenType, tokens);
  };
  auto fragments = VectorType::get({4, 2}, b.getBF16Type());
  // ldmatrix x4 rows: A, lanes 0-15 rows 0-15 at k, 16-31 at k + 8; B,
  // lanes 8m..8m+7 rows (m / 2) * 8 + 0..7 of the tile pair at k + (m % 2) * 8.
  Value aRowInTile = add(mul(warp, idx(kTileRows)), arith::RemUIOp::create(b, loc, lane, idx(16)));
  Value aK = mul(arith::DivUIOp::create(b, loc, lane, idx(16)), idx(8));
  Value matrix = arith::DivUIOp::create(b, loc, lane, idx(8));
  Value bRow = add(mul(arith::DivUIOp::create(b, loc, matrix, idx(2)), idx(8)),
                   arith::RemUIOp::create(b, loc, lane, idx(8)));
  Value bK = mul(arith::RemUIOp::create(b, loc, matrix, idx(2)), idx(8));

  const int64_t nTiles = 8;
  Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
  SmallVector<Value> init(4 * nTiles, zero);
  ValueRange results = stagedLoop(init, copyStage, [&](Value stage, int64_t half,
                                                        SmallVector<Value> &next) {
    Value aFrag = nvgpu::LdMatrixOp::create(
        b, loc, fragments, tileA, ValueRange{stage, aRowInTile, add(idx(16 * half), aK)},
        false, 4);
    SmallVector<Value> aRegs = {asI32(aFrag, 0), asI32(aFrag, 1), asI32(aFrag, 2),
                                asI32(aFrag, 3)};
    for (int64_t pair = 0; pair < nTiles / 2; ++pair) {
      Value bFrag = nvgpu::LdMatrixOp::create(
          b, loc, fragments, tileW,
          ValueRange{stage, add(idx(16 * pair), bRow), add(idx(16 * half), bK)}, false,
          4);
      for (int64_t t = 0; t < 2; ++t)
        mma(next, 2 * pair + t, aRegs,
            ValueRange{asI32(bFrag, 2 * t), asI32(bFrag, 2 * t + 1)});
    }
  });
  storeTile(results, lane, rowStart, col0, nTiles);
}

/// Accumulators c0, c1 (row g, columns 2q, 2q+1 of each n8 tile) and c2,
/// c3 (row g + 8) to the output, rows past the end left out.
void Kernel::storeTile(ValueRange c, Value lane, Value rowStart, Value col0, int64_t nTiles) {
  Value group = arith::DivUIOp::create(b, loc, lane, idx(4));
  Value pairCol = mul(arith::RemUIOp::create(b, loc, lane, idx(4)), idx(2));
  Value row0 = add(rowStart, group), row1 = add(row0, idx(8));
  for (int64_t j = 0; j < nTiles; ++j) {
    Value col = add(col0, add(idx(8 * j), pairCol));
    ValueRange tile = c.slice(4 * j, 4);
    ifThen(lt(row0, rows), [&] { store2(tile[0], tile[1], row0, col); });
    ifThen(lt(row1, rows), [&] { store2(tile[2], tile[3], row1, col); });
  }
}

/// Rows [rowStart, rowStart + 16) (those inside `rows`) of `width` columns
/// from col0 become 0, written by `count` threads (index `thread`).
void Kernel::zeroRows(Value thread, int64_t count, Value rowStart, Value col0, int64_t width) {
  Type element = cast<MemRefType>(out.getType()).getElementType();
  Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(element));
  for (int64_t i = 0; i < kTileRows * width; i += count) {
    // Element i + thread of the 16 x width tile, row-major.
    Value at = add(idx(i), thread);
    Value row = add(rowStart, arith::DivUIOp::create(b, loc, at, idx(width)));
    Value col = add(col0, arith::RemUIOp::create(b, loc, at, idx(width)));
    ifThen(lt(row, rows), [&] { memref::StoreOp::create(b, loc, zero, out, ValueRange{row, col}); });
  }
}

/// The warp's 16 x (8 * nTiles) products over the whole depth: nTiles
/// accumulators of four f32 each, stored by rows g and g + 8.
void Kernel::products(Value lane, Value rowStart, Value col0, int64_t nTiles, Value expert) {
  Value group = arith::DivUIOp::create(b, loc, lane, idx(4)); // row / column in a fragment
  Value pairCol = mul(arith::RemUIOp::create(b, loc, lane, idx(4)), idx(2));
  // Rows g and g + 8 of the tile; past the end they read the last row
  // (a zero product is discarded) and are not stored.
  Value row0 = add(rowStart, group), row1 = add(row0, idx(8));
  Value last = arith::SubIOp::create(b, loc, rows, idx(1));
  Value readRow0 = arith::MinUIOp::create(b, loc, row0, last);
  Value readRow1 = arith::MinUIOp::create(b, loc, row1, last);
  Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
  SmallVector<Value> init(4 * nTiles, zero);
  auto loop = scf::ForOp::create(
      b, loc, idx(0), idx(depth), idx(kDepthStep), init,
      [&](OpBuilder &nb, Location, Value k0, ValueRange acc) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
        SmallVector<Value> next(acc.begin(), acc.end());
        // All loads of both k16 steps first: more of them in flight.
        SmallVector<SmallVector<Value>> aFrag, bFrag;
        for (int64_t step = 0; step < kDepthStep / 16; ++step) {
          Value k = add(add(k0, idx(16 * step)), pairCol);
          Value kHigh = add(k, idx(8));
          aFrag.push_back({load2(a, {readRow0, k}), load2(a, {readRow1, k}),
                           load2(a, {readRow0, kHigh}), load2(a, {readRow1, kHigh})});
          for (int64_t j = 0; j < nTiles; ++j) {
            Value n = add(col0, add(idx(8 * j), group));
            auto at = [&](Value depthIndex) {
              return expert ? SmallVector<Value>{expert, n, depthIndex}
                            : SmallVector<Value>{n, depthIndex};
            };
            bFrag.push_back({load2(w, at(k)), load2(w, at(kHigh))});
          }
        }
        for (int64_t step = 0; step < kDepthStep / 16; ++step)
          for (int64_t j = 0; j < nTiles; ++j)
            mma(next, j, aFrag[step], bFrag[nTiles * step + j]);
        scf::YieldOp::create(b, loc, next);
      });
  storeTile(loop.getResults(), lane, rowStart, col0, nTiles);
}

} // namespace mlir::moe::gemm
