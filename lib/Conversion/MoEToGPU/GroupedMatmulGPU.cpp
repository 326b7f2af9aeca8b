//===- GroupedMatmulGPU.cpp - moe.grouped_matmul as a tensor-core kernel --===//
//
// A bf16 grouped GEMM over rows padded to tiles of 16 per expert (the
// dispatch's `row_tile`), on tensor cores: m16n8k16 `nvvm.mma.sync`, bf16
// in, f32 accumulators. The host picks one of two kernels by the row count:
//
//  - decode (at most 64 rows per expert on average): a block per tile of 16
//    rows by 32 columns (16 or 8 without experts), its warps taking turns
//    along the depth with 16-byte loads a lane straight from global memory,
//    summed in workgroup memory;
//  - prefill: for one expert or none (the shared expert, the router), the
//    wide form: a block per 128 rows by 64 columns, 4 warps of 64 x 32;
//    for several experts the narrow form: a block per 4 tiles of 16 rows by
//    64 columns, a warp per tile. Both stage the depth through workgroup
//    memory by cp.async (two stages) and read fragments by ldmatrix (the
//    narrow form where the block's tiles share an expert; elsewhere each
//    warp loads its own from global memory).
//
// A tile's expert is `row_expert` of its first row; padding rows are zero.
// The same kernels without experts compute a dense bf16 GEMM with f32
// results: the router's logits (RouteGPU.cpp, `moe-gpu-router-matmul`).
//
//===----------------------------------------------------------------------===//
#include "GPUKernels.h"
#include "moe/Conversion/Passes.h"
#include "moe/Conversion/ReadBuffer.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::moe {
#define GEN_PASS_DEF_CONVERTMOETOGPU
#define GEN_PASS_DEF_MOEGPUROUTERMATMUL
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
/// Rows of a tile: the M of one m16n8k16 product.
constexpr int64_t kTileRows = 16;
/// Columns a warp owns: four n8 products.
constexpr int64_t kWarpCols = 32;
constexpr int64_t kWarpSize = 32;
/// Depth per loop iteration: two k16 steps, whose loads are all issued
/// before their products.
constexpr int64_t kDepthStep = 32;
/// Warps of a prefill block.
constexpr int64_t kWarps = 4;
/// Elements of a row of a shared-memory stage: 32 of depth and 8 of padding.
constexpr int64_t kStageRow = 40;
/// The wide prefill form: blocks of 128 rows of one expert by 64 columns,
/// 4 warps of 64 x 32 outputs each (128 threads: ptxas may give each up to
/// 255 registers; with 256 threads it keeps to 128 and spills).
constexpr int64_t kWideRows = 128;
constexpr int64_t kWideCols = 64;
constexpr int64_t kWideWarps = 4;
/// At most this many rows per expert (on average) take the decode form.
constexpr int64_t kSplitMaxRowsPerExpert = 64;
/// Warps the decode form wants across the GPU (132 SMs x 16): fewer, and
/// too few weight loads are in flight to keep HBM busy.
constexpr int64_t kDecodeWarpsWanted = 2048;

/// The decode form's block: `warps` warps share the depth of one tile's 16
/// rows by 8 * `tiles` columns; per step each lane reads `chunks` runs of 16
/// bytes (8 of depth) of each of its rows, a quad of lanes 64 contiguous
/// bytes per run.
struct DecodeShape {
  int64_t warps, tiles, chunks;
  int64_t stepDepth() const { return 32 * chunks; }
};

struct Kernel {
  OpBuilder &b;
  Location loc;
  Value a, w, out, rowExpert, offsets; // buffers; no experts: w is [N, K]
  Value rows;                           // index: rows of a and out
  int64_t experts, cols, depth;

  bool grouped() const { return rowExpert != nullptr; }

  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, loc, x, y); }
  Value lt(Value x, Value y) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, x, y);
  }
  Value loadIndex(Value buffer, Value i) {
    Value v = memref::LoadOp::create(b, loc, buffer, ValueRange{i});
    return arith::IndexCastOp::create(b, loc, b.getIndexType(), v);
  }

  /// Two bf16 at [indices] (the last one even) as the i32 an mma operand
  /// register holds.
  Value load2(Value buffer, ValueRange indices) {
    auto pair = VectorType::get({2}, b.getBF16Type());
    auto load = vector::LoadOp::create(b, loc, pair, buffer, indices);
    load.setAlignment(uint64_t(4));
    Value bits = vector::BitCastOp::create(b, loc, VectorType::get({1}, b.getI32Type()), load);
    return vector::ExtractOp::create(b, loc, bits, ArrayRef<int64_t>{0});
  }

  /// Two f32 results at [row, col], rounded to the output's type.
  void store2(Value lo, Value hi, Value row, Value col) {
    Value pair = vector::FromElementsOp::create(b, loc, VectorType::get({2}, b.getF32Type()),
                                                ValueRange{lo, hi});
    Type element = cast<MemRefType>(out.getType()).getElementType();
    if (!element.isF32())
      pair = arith::TruncFOp::create(b, loc, VectorType::get({2}, element), pair);
    auto store = vector::StoreOp::create(b, loc, pair, out, ValueRange{row, col});
    store.setAlignment(uint64_t(2 * element.getIntOrFloatBitWidth() / 8));
  }

  /// Matrix i of an ldmatrix result (two bf16) as the i32 an mma operand
  /// register holds.
  Value asI32(Value matrices, int64_t i) {
    Value pair = vector::ExtractOp::create(b, loc, matrices, ArrayRef<int64_t>{i});
    Value bits = vector::BitCastOp::create(b, loc, VectorType::get({1}, b.getI32Type()), pair);
    return vector::ExtractOp::create(b, loc, bits, ArrayRef<int64_t>{0});
  }

  /// acc[4j..4j+4) += A x B over one m16n8k16 product (bf16 operands in
  /// i32 registers, f32 accumulators).
  void mma(SmallVector<Value> &acc, int64_t j, ValueRange aRegs, ValueRange bRegs) {
    Type f32 = b.getF32Type();
    auto mma = NVVM::MmaOp::create(
        b, loc, LLVM::LLVMStructType::getLiteral(b.getContext(), {f32, f32, f32, f32}), aRegs,
        bRegs, ValueRange(acc).slice(4 * j, 4), ArrayRef<int64_t>{16, 8, 16}, std::nullopt,
        std::nullopt, std::array<NVVM::MMATypes, 2>{NVVM::MMATypes::bf16, NVVM::MMATypes::bf16},
        std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row, NVVM::MMALayout::col});
    for (int64_t i = 0; i < 4; ++i)
      acc[4 * j + i] = LLVM::ExtractValueOp::create(b, loc, mma, i);
  }

  void ifThen(Value cond, function_ref<void()> then) {
    auto op = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(op.thenBlock());
    then();
  }

  void ifThenElse(Value cond, function_ref<void()> then, function_ref<void()> otherwise) {
    auto op = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(op.thenBlock());
    then();
    b.setInsertionPointToStart(op.elseBlock());
    otherwise();
  }

  /// Few rows per expert (decode): a block's four warps take a quarter of
  /// the depth each of the same 16 x 32 outputs, so that four times as many
  /// blocks stream the weights, each over a quarter of the loop. Many rows
  /// (prefill): a block's four warps take four consecutive row tiles of the
  /// same 64 columns over the whole depth, so that a weight read by one warp
  /// serves the others (from L1) when their tiles have the same expert. The
  /// host chooses from the row count.
  void build() {
    std::optional<DecodeShape> decode = decodeShape();
    if (!decode) {
      prefill();
      return;
    }
    // Rows per expert: N - E * 15 of the padded rows are choices.
    int64_t perExpert = kSplitMaxRowsPerExpert;
    Value limit = grouped() ? idx(experts * (perExpert + kTileRows - 1)) : idx(perExpert);
    auto choice = scf::IfOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ule, rows, limit),
        /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(choice.thenBlock());
    launchDecode(*decode);
    b.setInsertionPointToStart(choice.elseBlock());
    prefill();
  }

  /// Whether the wide prefill form takes this GEMM: one expert or none.
  /// (For several experts it lost to the narrow staged form: DeepSeek-V3's
  /// routed GEMMs at T = 4096 took 20.8 + 14.5 ms on an H200, in blocks of
  /// 128 rows of one expert from a block table, against 18.1 + 9.1 ms: an
  /// expert's ~136 rows make a full block and a nearly empty one.)
  bool wide() const {
    return cols % kWideCols == 0 && depth % kDepthStep == 0 && (!grouped() || experts == 1);
  }

  void prefill() { wide() ? launchWide() : launch(); }

  /// The wide prefill form of a GEMM of one expert or none: a block of 4
  /// warps computes rows 128 y.. (up to 128) by 64 columns, warp (m, n) of
  /// 2 x 2 the 64 x 32 at (64 m, 32 n). Each 32 of depth of the block's
  /// rows and weight rows go to shared memory by cp.async (two stages: the
  /// next copy runs while the warps multiply) and reach the tensor cores
  /// through ldmatrix (x4).
  void launchWide() {
    int64_t threads = kWideWarps * kWarpSize;
    auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
    auto stageType = [&](int64_t rows) {
      return MemRefType::get({2, rows, kStageRow}, b.getBF16Type(), MemRefLayoutAttrInterface{},
                             workgroup);
    };
    Value one = idx(1);
    Value rowBlocks = arith::CeilDivUIOp::create(b, loc, rows, idx(kWideRows));
    auto launch = gpu::LaunchOp::create(b, loc, idx(cols / kWideCols), rowBlocks, one,
                                        idx(threads), one, one, nullptr, nullptr, {},
                                        TypeRange{stageType(kWideRows), stageType(kWideCols)});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&launch.getBody().front());
    Value col0 = mul(launch.getBlockIds().x, idx(kWideCols));
    Value rowStart = mul(launch.getBlockIds().y, idx(kWideRows));
    Value rowEnd = arith::MinUIOp::create(b, loc, add(rowStart, idx(kWideRows)), rows);
    ArrayRef<BlockArgument> stages = launch.getWorkgroupAttributions();
    wideProducts(launch.getThreadIds().x, rowStart, rowEnd, col0, grouped() ? idx(0) : Value(),
                 stages[0], stages[1]);
    gpu::TerminatorOp::create(b, loc);
  }

  /// The wide form's products of rows [rowStart, rowEnd) (of `expert`, or
  /// none) with columns [col0, col0 + 64); rows past rowEnd read its last
  /// row and are not stored.
  void wideProducts(Value tid, Value rowStart, Value rowEnd, Value col0, Value expert,
                    Value tileA, Value tileW) {
    const int64_t steps = depth / kDepthStep;
    const int64_t threads = kWideWarps * kWarpSize;
    Value warp = arith::DivUIOp::create(b, loc, tid, idx(kWarpSize));
    Value lane = arith::RemUIOp::create(b, loc, tid, idx(kWarpSize));
    Value last = arith::SubIOp::create(b, loc, rowEnd, idx(1));
    auto tokenType = nvgpu::DeviceAsyncTokenType::get(b.getContext());
    // 4 runs of 16 bytes of each of the 128 rows and 64 weight rows.
    auto copyStage = [&](Value stage, Value k0) -> Value {
      SmallVector<Value> tokens;
      auto at = [&](int64_t i) -> std::pair<Value, Value> {
        Value chunk = add(tid, idx(threads * i));
        return {arith::DivUIOp::create(b, loc, chunk, idx(4)),
                mul(arith::RemUIOp::create(b, loc, chunk, idx(4)), idx(8))};
      };
      for (int64_t i = 0; i < kWideRows * 4 / threads; ++i) {
        auto [row, k] = at(i);
        Value aRow = arith::MinUIOp::create(b, loc, add(rowStart, row), last);
        tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
            b, loc, tokenType, tileA, ValueRange{stage, row, k}, a, ValueRange{aRow, add(k0, k)},
            b.getIndexAttr(8), Value(), b.getUnitAttr()));
      }
      for (int64_t i = 0; i < kWideCols * 4 / threads; ++i) {
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
    // Warp (m, n): rows 64 m.., columns 32 n...
    constexpr int64_t warpsAcross = kWideCols / 32;
    Value warpRow = mul(arith::DivUIOp::create(b, loc, warp, idx(warpsAcross)), idx(64));
    Value warpCol = mul(arith::RemUIOp::create(b, loc, warp, idx(warpsAcross)), idx(32));
    // ldmatrix x4 rows: A, lanes 0-15 rows 0-15 at k, 16-31 at k + 8; B,
    // lanes 8m..8m+7 rows (m / 2) * 8 + 0..7 of the tile pair at k + (m % 2) * 8.
    Value aRowInTile = add(warpRow, arith::RemUIOp::create(b, loc, lane, idx(16)));
    Value aK = mul(arith::DivUIOp::create(b, loc, lane, idx(16)), idx(8));
    Value matrix = arith::DivUIOp::create(b, loc, lane, idx(8));
    Value bRow = add(warpCol, add(mul(arith::DivUIOp::create(b, loc, matrix, idx(2)), idx(8)),
                                  arith::RemUIOp::create(b, loc, lane, idx(8))));
    Value bK = mul(arith::RemUIOp::create(b, loc, matrix, idx(2)), idx(8));

    constexpr int64_t rowTiles = 4, colTiles = 4; // of 16 rows, of 8 columns
    Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
    SmallVector<Value> init(4 * rowTiles * colTiles, zero);
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
          for (int64_t half = 0; half < kDepthStep / 16; ++half) {
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
                  ValueRange{stage, add(aRowInTile, idx(16 * i)), add(idx(16 * half), aK)}, false,
                  4);
              SmallVector<Value> aRegs = {asI32(aFrag, 0), asI32(aFrag, 1), asI32(aFrag, 2),
                                          asI32(aFrag, 3)};
              for (int64_t j = 0; j < colTiles; ++j)
                mma(next, i * colTiles + j, aRegs, bRegs[j]);
            }
          }
          // Every warp is done with this stage before it is copied over.
          gpu::BarrierOp::create(b, loc);
          scf::YieldOp::create(b, loc, next);
        });
    // The last iteration's copy lands before the block exits.
    nvgpu::DeviceAsyncWaitOp::create(b, loc, firstCopy, b.getI32IntegerAttr(0));
    Value group = arith::DivUIOp::create(b, loc, lane, idx(4));
    Value pairCol = mul(arith::RemUIOp::create(b, loc, lane, idx(4)), idx(2));
    for (int64_t i = 0; i < rowTiles; ++i)
      for (int64_t j = 0; j < colTiles; ++j) {
        Value row0 = add(rowStart, add(warpRow, add(idx(16 * i), group)));
        Value row1 = add(row0, idx(8));
        Value col = add(col0, add(warpCol, add(idx(8 * j), pairCol)));
        ValueRange tile = ValueRange(loop.getResults()).slice(4 * (i * colTiles + j), 4);
        ifThen(lt(row0, rowEnd), [&] { store2(tile[0], tile[1], row0, col); });
        ifThen(lt(row1, rowEnd), [&] { store2(tile[2], tile[3], row1, col); });
      }
  }

  /// Four warps a block and 32 columns for a GEMM of several experts (a
  /// batch has a tile of rows for each expert it touches); eight warps
  /// for one expert or none (the shared expert, the router), whose batch
  /// has one tile of rows, and 16 columns, or 8 where 16 leave too few
  /// warps. Runs of 4 x 16 bytes a lane where the depth allows. None if
  /// the depth does not divide. (On an H200, DeepSeek-V3's routed GEMMs
  /// at T = 64 took 1.94 + 1.04 ms with 32 columns, 1.97 + 1.14 with 8,
  /// 2.31 + 1.26 with 16, and 2.5 + 1.2 with runs of 8 x 16 bytes.)
  std::optional<DecodeShape> decodeShape() const {
    const bool several = grouped() && experts > 1;
    for (int64_t warps = several ? 4 : 8; warps >= 4; warps /= 2)
      for (int64_t chunks : {4, 2, 1})
        if (depth % (warps * 32 * chunks) == 0) {
          int64_t tiles = several && cols % 32 == 0 ? 4
                          : cols / 16 * warps >= kDecodeWarpsWanted ? 2
                                                                     : 1;
          return DecodeShape{warps, tiles, chunks};
        }
    return std::nullopt;
  }

  /// The narrow prefill form: a block's 4 warps take 4 consecutive tiles
  /// of 16 rows of the same 32 or 64 columns. With 64 columns, where the 4
  /// tiles have one expert, each 32 of depth of the block's rows and weight
  /// rows is staged through workgroup memory (cp.async, two stages) and read
  /// by ldmatrix; elsewhere each warp loads its own fragments.
  void launch() {
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

  /// The decode form: a block per tile of 16 rows and 8 * shape.tiles
  /// columns, its warps taking turns along the depth. Each lane
  /// loads 16 bytes of depth at a time of its A rows (g, g + 8) and weight
  /// rows (g of each n8 tile); the m16n8k16 products take them in a
  /// permuted depth order, the same for A and B (a sum does not care), so
  /// no lane exchanges anything. The warps' partial sums meet in workgroup
  /// memory, each output summed by one thread in warp order.
  void launchDecode(DecodeShape shape) {
    int64_t threads = shape.warps * kWarpSize;
    int64_t blockCols = 8 * shape.tiles;
    auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
    auto partialsType = MemRefType::get({shape.warps, kTileRows, blockCols}, b.getF32Type(),
                                        MemRefLayoutAttrInterface{}, workgroup);
    Value one = idx(1);
    Value rowBlocks = arith::DivUIOp::create(b, loc, add(rows, idx(kTileRows - 1)), idx(kTileRows));
    auto launch = gpu::LaunchOp::create(b, loc, idx(cols / blockCols), rowBlocks, one,
                                        idx(threads), one, one, nullptr, nullptr, {},
                                        TypeRange{partialsType});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&launch.getBody().front());
    Value tid = launch.getThreadIds().x;
    Value warp = arith::DivUIOp::create(b, loc, tid, idx(kWarpSize));
    Value lane = arith::RemUIOp::create(b, loc, tid, idx(kWarpSize));
    Value rowStart = mul(launch.getBlockIds().y, idx(kTileRows));
    Value col0 = mul(launch.getBlockIds().x, idx(blockCols));
    Value partials = launch.getWorkgroupAttributions()[0];
    auto compute = [&](Value expert) {
      decodeProducts(shape, tid, warp, lane, rowStart, col0, expert, partials);
    };
    if (!grouped())
      compute(Value());
    else
      tileOfExpert(rowStart, loadIndex(offsets, idx(experts)),
                   [&] { zeroRows(tid, threads, rowStart, col0, blockCols); }, compute);
    gpu::TerminatorOp::create(b, loc);
  }

  /// Whether `row` is padding (row_expert -1).
  Value isPadding(Value row) {
    Value expertI32 = memref::LoadOp::create(b, loc, rowExpert, ValueRange{row});
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, expertI32,
                                 arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0)));
  }

  /// `row`, or `other` where `row` is padding of a grouped GEMM.
  Value realRowOr(Value row, Value other) {
    if (!grouped())
      return row;
    return arith::SelectOp::create(b, loc, isPadding(row), other, row);
  }

  /// 16 bytes (8 of depth) at `indices` as four i32 registers.
  SmallVector<Value> load8(Value buffer, ValueRange indices) {
    auto run = VectorType::get({8}, b.getBF16Type());
    auto load = vector::LoadOp::create(b, loc, run, buffer, indices);
    load.setAlignment(uint64_t(16));
    Value bits = vector::BitCastOp::create(b, loc, VectorType::get({4}, b.getI32Type()), load);
    SmallVector<Value> regs;
    for (int64_t i = 0; i < 4; ++i)
      regs.push_back(vector::ExtractOp::create(b, loc, bits, ArrayRef<int64_t>{i}));
    return regs;
  }

  /// The decode form's products. Lane (g = lane / 4, q = lane % 4) holds,
  /// per run of 32 of depth at k, elements k + 8q .. k + 8q + 7 of its rows
  /// as registers r0..r3. For the two k16 products h = 0, 1 of the run, r[2h]
  /// stands for the fragment's depth 2q, 2q + 1 and r[2h + 1] for 2q + 8,
  /// 2q + 9, in A (a0/a2 of row g, a1/a3 of row g + 8) and in B alike.
  void decodeProducts(DecodeShape shape, Value tid, Value warp, Value lane, Value rowStart,
                      Value col0, Value expert, Value partials) {
    Value group = arith::DivUIOp::create(b, loc, lane, idx(4));
    Value quadOffset = mul(arith::RemUIOp::create(b, loc, lane, idx(4)), idx(8));
    // The warps take turns along the depth, a step each, so that together
    // they read warps x 64 contiguous bytes of each weight row at a time
    // (fewer DRAM pages opened than a contiguous share per warp).
    Value kBegin = mul(warp, idx(shape.stepDepth()));
    // Rows past the end and an expert's padding rows read the tile's first
    // row (a warp's loads of one address are one transaction); their
    // products are not stored or become zeros.
    Value last = arith::SubIOp::create(b, loc, rows, idx(1));
    Value row0 = add(rowStart, group);
    Value readRow0 = realRowOr(arith::MinUIOp::create(b, loc, row0, last), rowStart);
    Value readRow1 = realRowOr(arith::MinUIOp::create(b, loc, add(row0, idx(8)), last), rowStart);
    Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
    SmallVector<Value> init(4 * shape.tiles, zero);
    auto loop = scf::ForOp::create(
        b, loc, kBegin, idx(depth), idx(shape.warps * shape.stepDepth()), init,
        [&](OpBuilder &nb, Location, Value k0, ValueRange acc) {
          OpBuilder::InsertionGuard inner(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          SmallVector<Value> next(acc.begin(), acc.end());
          // Every load of the step first: more of them in flight.
          SmallVector<SmallVector<Value>> a0, a1, w;
          for (int64_t c = 0; c < shape.chunks; ++c) {
            Value k = add(add(k0, idx(32 * c)), quadOffset);
            a0.push_back(load8(a, {readRow0, k}));
            a1.push_back(load8(a, {readRow1, k}));
            for (int64_t j = 0; j < shape.tiles; ++j) {
              Value n = add(col0, add(idx(8 * j), group));
              w.push_back(expert ? load8(this->w, {expert, n, k}) : load8(this->w, {n, k}));
            }
          }
          for (int64_t c = 0; c < shape.chunks; ++c)
            for (int64_t h = 0; h < 2; ++h)
              for (int64_t j = 0; j < shape.tiles; ++j) {
                ArrayRef<Value> wRegs = w[shape.tiles * c + j];
                mma(next, j,
                    ValueRange{a0[c][2 * h], a1[c][2 * h], a0[c][2 * h + 1], a1[c][2 * h + 1]},
                    ValueRange{wRegs[2 * h], wRegs[2 * h + 1]});
              }
          scf::YieldOp::create(b, loc, next);
        });
    // Accumulator 4j + i holds row g + 8 (i / 2), column 8j + 2q + i % 2.
    Value pairCol = arith::DivUIOp::create(b, loc, quadOffset, idx(4));
    for (int64_t j = 0; j < shape.tiles; ++j)
      for (int64_t i = 0; i < 4; ++i)
        memref::StoreOp::create(
            b, loc, loop.getResult(4 * j + i), partials,
            ValueRange{warp, add(group, idx(8 * (i / 2))), add(idx(8 * j + i % 2), pairCol)});
    gpu::BarrierOp::create(b, loc);
    int64_t blockCols = 8 * shape.tiles;
    int64_t outputs = kTileRows * blockCols;
    Type element = cast<MemRefType>(out.getType()).getElementType();
    for (int64_t first = 0; first < outputs; first += shape.warps * kWarpSize) {
      Value at = add(tid, idx(first));
      Value row = arith::DivUIOp::create(b, loc, at, idx(blockCols));
      Value col = arith::RemUIOp::create(b, loc, at, idx(blockCols));
      Value outRow = add(rowStart, row);
      Value inside = arith::AndIOp::create(b, loc, lt(at, idx(outputs)), lt(outRow, rows));
      ifThen(inside, [&] {
        Value sum = memref::LoadOp::create(b, loc, partials, ValueRange{idx(0), row, col});
        for (int64_t other = 1; other < shape.warps; ++other)
          sum = arith::AddFOp::create(
              b, loc, sum, memref::LoadOp::create(b, loc, partials, ValueRange{idx(other), row, col}));
        if (grouped())
          sum = arith::SelectOp::create(b, loc, isPadding(outRow), zero, sum);
        if (!element.isF32())
          sum = arith::TruncFOp::create(b, loc, element, sum);
        memref::StoreOp::create(b, loc, sum, out, ValueRange{outRow, add(col0, col)});
      });
    }
  }

  /// Each warp its own tile.
  void perWarp(Value lane, Value rowStart, Value col0, int64_t blockCols, Value used,
               function_ref<void(Value)> compute) {
    tileOfExpert(rowStart, used, [&] { zeroRows(lane, kWarpSize, rowStart, col0, blockCols); },
                 compute);
  }

  /// The products of the tile at rowStart with its expert's weights, or
  /// zeros past the used rows or for a tile of no expert.
  void tileOfExpert(Value rowStart, Value used, function_ref<void()> zero,
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
  void stagedProducts(Value tid, Value warp, Value lane, Value blockRow0, Value rowStart,
                      Value col0, Value expert, Value tileA, Value tileW) {
    const int64_t steps = depth / kDepthStep;
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
          for (int64_t half = 0; half < kDepthStep / 16; ++half) {
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
          }
          // Every warp is done with this stage before it is copied over.
          gpu::BarrierOp::create(b, loc);
          scf::YieldOp::create(b, loc, next);
        });
    // The last iteration's copy lands before the block exits.
    nvgpu::DeviceAsyncWaitOp::create(b, loc, firstCopy, b.getI32IntegerAttr(0));
    storeTile(loop.getResults(), lane, rowStart, col0, nTiles);
  }

  /// Accumulators c0, c1 (row g, columns 2q, 2q+1 of each n8 tile) and c2,
  /// c3 (row g + 8) to the output, rows past the end left out.
  void storeTile(ValueRange c, Value lane, Value rowStart, Value col0, int64_t nTiles) {
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
  void zeroRows(Value thread, int64_t count, Value rowStart, Value col0, int64_t width) {
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
  void products(Value lane, Value rowStart, Value col0, int64_t nTiles, Value expert) {
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
};

} // namespace

bool mlir::moe::denseTensorCoreGemmApplies(int64_t cols, int64_t depth) {
  return cols % kWarpCols == 0 && depth % kDepthStep == 0;
}

void mlir::moe::buildDenseTensorCoreGemm(OpBuilder &b, Location loc, Value a, Value w, Value out,
                                         Value rows, int64_t cols, int64_t depth) {
  Kernel{b, loc, a, w, out, Value(), Value(), rows, 0, cols, depth}.build();
}

namespace {
/// Whether no row tile of 16 can hold rows of two experts: the offsets come
/// from a dispatch that pads each expert to 16 rows, or there is one expert.
bool tilesHoldOneExpert(GroupedMatmulOp op) {
  if (op.getWeight().getType().getDimSize(0) == 1)
    return true;
  auto dispatch = op.getExpertOffsets().getDefiningOp<DispatchOp>();
  return dispatch && !dispatch.getCapacity() && dispatch.getRowTile() &&
         *dispatch.getRowTile() % kTileRows == 0;
}

struct GroupedMatmulToGPU : OpRewritePattern<GroupedMatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(GroupedMatmulOp op, PatternRewriter &rewriter) const override {
    auto inType = op.getInput().getType();
    auto wType = op.getWeight().getType();
    if (op.getScales() || !op.getExpertOffsets())
      return rewriter.notifyMatchFailure(op, "needs the grouped layout, no FP8");
    if (!inType.getElementType().isBF16() || !wType.getElementType().isBF16())
      return rewriter.notifyMatchFailure(op, "bf16 tensor cores only");
    if (!wType.hasStaticShape() || inType.isDynamicDim(1))
      return rewriter.notifyMatchFailure(op, "needs static E, N and K");
    int64_t cols = wType.getDimSize(1), depth = wType.getDimSize(2);
    if (cols % kWarpCols != 0 || depth % kDepthStep != 0)
      return rewriter.notifyMatchFailure(op, "N must be a multiple of 32 and K of 32");
    if (!tilesHoldOneExpert(op))
      return rewriter.notifyMatchFailure(op, "rows not padded to tiles of 16 per expert");

    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Value rows = tensor::DimOp::create(b, loc, op.getInput(), 0);
    auto outType = MemRefType::get({inType.getDimSize(0), cols}, b.getBF16Type());
    Value out = memref::AllocOp::create(b, loc, outType,
                                        outType.isDynamicDim(0) ? ValueRange{rows} : ValueRange{});
    Kernel kernel{b,
                  loc,
                  readBuffer(b, loc, op.getInput()),
                  readBuffer(b, loc, op.getWeight()),
                  out,
                  readBuffer(b, loc, op.getRowExpert()),
                  readBuffer(b, loc, op.getExpertOffsets()),
                  rows,
                  wType.getDimSize(0),
                  cols,
                  depth};
    kernel.build();
    Value result = bufferization::ToTensorOp::create(
        b, loc, RankedTensorType::get(outType.getShape(), b.getBF16Type()), out,
        /*restrict=*/true, /*writable=*/true);
    if (result.getType() != op.getType())
      result = tensor::CastOp::create(b, loc, op.getType(), result);
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// `logits[t, e] = sum_k f32(x[t, k]) * f32(w[e, k])` over bf16 x and w
/// into zeros: the router's GEMM as convert-moe-to-linalg writes it.
struct RouterMatmulToGPU : OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(linalg::GenericOp op, PatternRewriter &rewriter) const override {
    if (op.getNumDpsInputs() != 2 || op.getNumDpsInits() != 1 || !op.hasPureTensorSemantics())
      return rewriter.notifyMatchFailure(op, "not a two-input tensor op");
    MLIRContext *ctx = op.getContext();
    AffineExpr t, e, k;
    bindDims(ctx, t, e, k);
    SmallVector<AffineMap> maps = {AffineMap::get(3, 0, {t, k}, ctx),
                                   AffineMap::get(3, 0, {e, k}, ctx),
                                   AffineMap::get(3, 0, {t, e}, ctx)};
    if (op.getIndexingMapsArray() != maps ||
        op.getIteratorTypesArray() !=
            SmallVector<utils::IteratorType>{utils::IteratorType::parallel,
                                             utils::IteratorType::parallel,
                                             utils::IteratorType::reduction})
      return rewriter.notifyMatchFailure(op, "not x[t,k] * w[e,k] -> out[t,e]");
    Value x = op.getDpsInputs()[0], w = op.getDpsInputs()[1];
    auto xType = cast<RankedTensorType>(x.getType());
    auto wType = cast<RankedTensorType>(w.getType());
    auto outType = cast<RankedTensorType>(op.getResult(0).getType());
    if (!xType.getElementType().isBF16() || !wType.getElementType().isBF16() ||
        !outType.getElementType().isF32() || !wType.hasStaticShape())
      return rewriter.notifyMatchFailure(op, "bf16 x and w, f32 out, static w");
    if (!isMultiplyAccumulate(op.getRegion().front()) || !isZeroFill(op.getDpsInits()[0]))
      return rewriter.notifyMatchFailure(op, "not a sum of products into zeros");
    int64_t cols = wType.getDimSize(0), depth = wType.getDimSize(1);
    if (!denseTensorCoreGemmApplies(cols, depth))
      return rewriter.notifyMatchFailure(op, "N must be a multiple of 32 and K of 32");
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Value rows = tensor::DimOp::create(b, loc, x, 0);
    auto bufferType = MemRefType::get(outType.getShape(), b.getF32Type());
    Value out = memref::AllocOp::create(b, loc, bufferType,
                                        bufferType.isDynamicDim(0) ? ValueRange{rows} : ValueRange{});
    buildDenseTensorCoreGemm(b, loc, readBuffer(b, loc, x), readBuffer(b, loc, w), out, rows,
                             cols, depth);
    rewriter.replaceOp(op, bufferization::ToTensorOp::create(b, loc, outType, out,
                                                             /*restrict=*/true,
                                                             /*writable=*/true));
    return success();
  }

  /// extf, extf, mulf, addf onto the accumulator, yield (and unused
  /// linalg.index ops, which the lowering leaves in every body).
  static bool isMultiplyAccumulate(Block &body) {
    SmallVector<StringRef> names;
    for (Operation &op : body)
      if (!isa<linalg::IndexOp>(op) || !op.use_empty())
        names.push_back(op.getName().getStringRef());
    auto yield = cast<linalg::YieldOp>(body.getTerminator());
    auto add = yield.getValues()[0].getDefiningOp<arith::AddFOp>();
    return names == SmallVector<StringRef>{"arith.extf", "arith.extf", "arith.mulf", "arith.addf",
                                           "linalg.yield"} &&
           add && llvm::is_contained(add->getOperands(), body.getArgument(2));
  }

  static bool isZeroFill(Value init) {
    auto fill = init.getDefiningOp<linalg::FillOp>();
    if (!fill)
      return false;
    auto constant = fill.getInputs()[0].getDefiningOp<arith::ConstantFloatOp>();
    return constant && constant.value().isZero();
  }
};

struct MoEGPURouterMatmulPass
    : moe::impl::MoEGPURouterMatmulBase<MoEGPURouterMatmulPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<RouterMatmulToGPU>(&getContext());
    SmallVector<Operation *> generics;
    getOperation()->walk([&](linalg::GenericOp op) { generics.push_back(op); });
    if (failed(applyOpPatternsGreedily(generics, std::move(patterns))))
      signalPassFailure();
  }
};

struct ConvertMoEToGPUPass : moe::impl::ConvertMoEToGPUBase<ConvertMoEToGPUPass> {
  void runOnOperation() override {
    // The GEMMs first: whether their rows come in tiles of one expert is
    // read off the moe.dispatch that the second step replaces.
    RewritePatternSet gemmPatterns(&getContext());
    gemmPatterns.add<GroupedMatmulToGPU>(&getContext());
    SmallVector<Operation *> gemms, others;
    getOperation()->walk([&](Operation *op) {
      if (isa<GroupedMatmulOp>(op))
        gemms.push_back(op);
      if (isa<RouteOp, DispatchOp>(op))
        others.push_back(op);
    });
    RewritePatternSet patterns(&getContext());
    populateRouteToGPUPatterns(patterns);
    populateDispatchToGPUPatterns(patterns);
    if (failed(applyOpPatternsGreedily(gemms, std::move(gemmPatterns))) ||
        failed(applyOpPatternsGreedily(others, std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
