//===- GemmWgmma.cpp - the block form's products by wgmma (sm_90a) --------===//
//
// Hopper's warpgroup MMA reads both operands from shared memory through
// 64-bit descriptors, so the products need no ldmatrix and no fragment
// registers: per k16 of a stage one `wgmma.mma_async` m64nCk16 of the
// block's 64 rows by C weight rows. The stages are rows of 64 of depth
// (128 bytes), stored with the 128-byte swizzle (16-byte chunk c of row r
// at chunk c ^ (r % 8)) that the descriptors name, which keeps the 8 rows
// a core matrix spans in distinct banks.
//
//===----------------------------------------------------------------------===//
#include "GemmKernel.h"

using namespace mlir;

namespace mlir::moe::gemm {

/// Bytes of depth one wgmma k16 step advances inside a swizzled row.
constexpr int64_t kStepBytes = 16 * 2;

void Kernel::wgmmaProducts(BlockShape shape, Value tid, Value rowStart, Value rowEnd, Value col0,
                           Value expert, Value tileA, Value tileW) {
  const int64_t threads = kWideWarps * kWarpSize;
  const int64_t chunks = shape.depth / 8; // 16-byte chunks of a staged row
  Value last = arith::SubIOp::create(b, loc, rowEnd, idx(1));
  auto tokenType = nvgpu::DeviceAsyncTokenType::get(b.getContext());
  auto copyStage = [&](Value stage, Value k0) -> Value {
    SmallVector<Value> tokens;
    auto at = [&](int64_t i) -> std::tuple<Value, Value, Value> {
      Value chunk = add(tid, idx(threads * i));
      Value row = arith::DivUIOp::create(b, loc, chunk, idx(chunks));
      Value c = arith::RemUIOp::create(b, loc, chunk, idx(chunks));
      Value swizzled =
          arith::XOrIOp::create(b, loc, c, arith::RemUIOp::create(b, loc, row, idx(8)));
      return {row, mul(c, idx(8)), mul(swizzled, idx(8))};
    };
    for (int64_t i = 0; i < shape.rows * chunks / threads; ++i) {
      auto [row, k, slot] = at(i);
      Value aRow = arith::MinUIOp::create(b, loc, add(rowStart, row), last);
      tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
          b, loc, tokenType, tileA, ValueRange{stage, row, slot}, a, ValueRange{aRow, add(k0, k)},
          b.getIndexAttr(8), Value(), b.getUnitAttr()));
    }
    for (int64_t i = 0; i < shape.cols * chunks / threads; ++i) {
      auto [row, k, slot] = at(i);
      Value n = add(col0, row);
      SmallVector<Value> wAt =
          expert ? SmallVector<Value>{expert, n, add(k0, k)} : SmallVector<Value>{n, add(k0, k)};
      tokens.push_back(
          nvgpu::DeviceAsyncCopyOp::create(b, loc, tokenType, tileW, ValueRange{stage, row, slot},
                                           w, wAt, b.getIndexAttr(8), Value(), b.getUnitAttr()));
    }
    return nvgpu::DeviceAsyncCreateGroupOp::create(b, loc, tokenType, tokens);
  };

  // Descriptor of the operand at `base` + `offset` bytes: its address / 16
  // (14 bits), leading byte offset 1 (unused by swizzled K-major
  // operands), 1024 bytes between groups of 8 rows, the 128-byte swizzle.
  Type i64 = b.getI64Type();
  auto constant = [&](int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
  };
  auto addressOf = [&](Value tile) {
    Value address = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, tile);
    return arith::IndexCastUIOp::create(b, loc, i64, address).getResult();
  };
  Value aBase = addressOf(tileA), wBase = addressOf(tileW);
  const int64_t fixedBits = (int64_t(1) << 16) | ((kSwizzleBytes / 16) << 32) | (int64_t(1) << 62);
  auto descriptor = [&](Value base, Value stage, int64_t stageBytes, int64_t part) -> Value {
    Value offset =
        arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, stage, constant(stageBytes)),
                              constant(part * kStepBytes));
    Value address = arith::AddIOp::create(b, loc, base, offset);
    Value field = arith::AndIOp::create(
        b, loc, arith::ShRUIOp::create(b, loc, address, constant(4)), constant(0x3fff));
    return arith::OrIOp::create(b, loc, field, constant(fixedBits));
  };
  const int64_t aStageBytes = shape.rows * shape.stageRow() * 2;
  const int64_t wStageBytes = shape.cols * shape.stageRow() * 2;
  const int64_t parts = shape.depth / 16;
  // With 3 stages or more, a step's batch of wgmma runs on while the next
  // one is issued (the copies run a step less ahead); with 2, each batch
  // ends before the next step's barrier.
  const int64_t inFlight = shape.stages >= 3 ? 1 : 0;

  // The warpgroup's m64 x C accumulators: per n8 tile j, c0..c3 of
  // elements 4j..4j+3 as in an m16n8 product of the warp's 16 rows.
  Type f32 = b.getF32Type();
  auto accType =
      LLVM::LLVMStructType::getLiteral(b.getContext(), SmallVector<Type>(shape.cols / 2, f32));
  Value zero = LLVM::ZeroOp::create(b, loc, accType);
  auto mmaShape = NVVM::MMAShapeAttr::get(b.getContext(), 64, shape.cols, 16);
  ValueRange results = pipelinedLoop(
      shape, ValueRange{zero}, copyStage,
      [&](Value stage, int64_t part, SmallVector<Value> &next) {
        Value stage64 = arith::IndexCastUIOp::create(b, loc, i64, stage);
        if (part == 0)
          NVVM::WgmmaFenceAlignedOp::create(b, loc);
        next[0] = NVVM::WgmmaMmaAsyncOp::create(
            b, loc, accType, next[0], descriptor(aBase, stage64, aStageBytes, part),
            descriptor(wBase, stage64, wStageBytes, part), mmaShape, NVVM::WGMMATypes::bf16,
            NVVM::WGMMATypes::bf16, NVVM::WGMMATypes::f32, NVVM::WGMMAScaleOut::one,
            NVVM::WGMMAScaleIn::one, NVVM::WGMMAScaleIn::one, NVVM::MMALayout::row,
            NVVM::MMALayout::col, /*satfinite=*/nullptr);
        if (part + 1 < parts)
          return;
        // At most `inFlight` batches still read their stages when the next
        // step's barrier lets a copy overwrite the stage before them.
        NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
        NVVM::WgmmaWaitGroupSyncOp::create(b, loc, inFlight);
      },
      /*proxyFence=*/true, /*lag=*/inFlight);
  if (inFlight)
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);

  Value warp = arith::DivUIOp::create(b, loc, tid, idx(kWarpSize));
  Value lane = arith::RemUIOp::create(b, loc, tid, idx(kWarpSize));
  Value group = arith::DivUIOp::create(b, loc, lane, idx(4));
  Value pairCol = mul(arith::RemUIOp::create(b, loc, lane, idx(4)), idx(2));
  Value row0 = add(rowStart, add(mul(warp, idx(16)), group));
  Value row1 = add(row0, idx(8));
  for (int64_t j = 0; j < shape.cols / 8; ++j) {
    SmallVector<Value> c;
    for (int64_t i = 0; i < 4; ++i)
      c.push_back(LLVM::ExtractValueOp::create(b, loc, results[0], 4 * j + i));
    Value col = add(col0, add(idx(8 * j), pairCol));
    ifThen(lt(row0, rowEnd), [&] { store2(c[0], c[1], row0, col); });
    ifThen(lt(row1, rowEnd), [&] { store2(c[2], c[3], row1, col); });
  }
}

} // namespace mlir::moe::gemm
