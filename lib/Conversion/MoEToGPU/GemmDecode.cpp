//===- GemmDecode.cpp - the decode form of the tensor-core GEMM -------------===//
//
// Few rows per expert: a block per tile of 16 rows, its warps taking turns
// along the depth with 16-byte loads a lane, summed in workgroup memory.
// FP8 weights: 8-byte loads of codes, decoded to bf16 in registers, each
// step's products times its scale block's scale.
//
//===----------------------------------------------------------------------===//
#include "GemmKernel.h"

#include <cmath>

using namespace mlir;

namespace mlir::moe::gemm {

/// Four warps a block and 32 columns for a GEMM of several experts (a
/// batch has a tile of rows for each expert it touches); eight warps
/// for one expert or none (the shared expert, the router), whose batch
/// has one tile of rows, and 16 columns, or 8 where 16 leave too few
/// warps. Runs of 4 x 16 bytes a lane where the depth allows. None if
/// the depth does not divide. (On an H200, DeepSeek-V3's routed GEMMs
/// at T = 64 took 1.94 + 1.04 ms with 32 columns, 1.97 + 1.14 with 8,
/// 2.31 + 1.26 with 16, and 2.5 + 1.2 with runs of 8 x 16 bytes.)
std::optional<DecodeShape> Kernel::decodeShape() const {
  const bool several = grouped() && experts > 1;
  for (int64_t warps = several ? 4 : 8; warps >= 4; warps /= 2)
    for (int64_t chunks : {4, 2, 1})
      // FP8 weights: a step's depth within one scale block.
      if (depth % (warps * 32 * chunks) == 0 && (!fp8() || scaleDepth % (32 * chunks) == 0)) {
        int64_t tiles = several && cols % 32 == 0 ? 4
                        : cols / 16 * warps >= kDecodeWarpsWanted ? 2
                                                                   : 1;
        DecodeShape shape{warps, tiles, chunks};
        if (depthPartials) {
          shape.splits = cast<MemRefType>(depthPartials.getType()).getDimSize(0);
          while ((depth / shape.splits) % (warps * shape.stepDepth()) != 0)
            shape.chunks /= 2;
        }
        return shape;
      }
  return std::nullopt;
}

/// The decode form: a block per tile of 16 rows and 8 * shape.tiles
/// columns, its warps taking turns along the depth. Each lane
/// loads 16 bytes of depth at a time of its A rows (g, g + 8) and weight
/// rows (g of each n8 tile); the m16n8k16 products take them in a
/// permuted depth order, the same for A and B (a sum does not care), so
/// no lane exchanges anything. The warps' partial sums meet in workgroup
/// memory, each output summed by one thread in warp order.
void Kernel::launchDecode(DecodeShape shape) {
  int64_t threads = shape.warps * kWarpSize;
  int64_t blockCols = 8 * shape.tiles;
  auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  auto partialsType = MemRefType::get({shape.warps, kTileRows, blockCols}, b.getF32Type(),
                                      MemRefLayoutAttrInterface{}, workgroup);
  Value one = idx(1);
  Value rowsRoundedUp = add(rows, idx(kTileRows - 1));
  Value rowBlocks = arith::DivUIOp::create(b, loc, rowsRoundedUp, idx(kTileRows));
  Value colBlocks = idx(cols / blockCols), splits = idx(shape.splits), blockThreads = idx(threads);
  auto launch = gpu::LaunchOp::create(b, loc, colBlocks, rowBlocks, splits, blockThreads, one, one,
                                      nullptr, nullptr, {}, TypeRange{partialsType});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());
  Value tid = launch.getThreadIds().x;
  Value warp = arith::DivUIOp::create(b, loc, tid, idx(kWarpSize));
  Value lane = arith::RemUIOp::create(b, loc, tid, idx(kWarpSize));
  Value rowStart = mul(launch.getBlockIds().y, idx(kTileRows));
  Value col0 = mul(launch.getBlockIds().x, idx(blockCols));
  Value partials = launch.getWorkgroupAttributions()[0];
  Value split = launch.getBlockIds().z;
  auto compute = [&](Value expert) {
    decodeProducts(shape, tid, warp, lane, rowStart, col0, expert, partials, split);
  };
  if (!grouped())
    compute(Value());
  else
    tileOfExpert(rowStart, loadIndex(offsets, idx(experts)),
                 [&] { zeroRows(tid, threads, rowStart, col0, blockCols); }, compute);
  gpu::TerminatorOp::create(b, loc);
}

/// Whether `row` is padding (row_expert -1).
Value Kernel::isPadding(Value row) {
  Value expertI32 = memref::LoadOp::create(b, loc, rowExpert, ValueRange{row});
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, expertI32,
                               arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0)));
}

/// `row`, or `other` where `row` is padding of a grouped GEMM.
Value Kernel::realRowOr(Value row, Value other) {
  if (!grouped())
    return row;
  return arith::SelectOp::create(b, loc, isPadding(row), other, row);
}

/// 8 E4M3 codes at `indices` as the four i32 registers of their bf16
/// values, the layout of load8().
SmallVector<Value> Kernel::loadCodes8(Value buffer, ValueRange indices) {
  auto run = VectorType::get({8}, b.getI8Type());
  auto load = vector::LoadOp::create(b, loc, run, buffer, indices);
  load.setAlignment(uint64_t(8));
  Value zeros = arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(run, b.getI8IntegerAttr(0).getValue()));
  SmallVector<Value> regs;
  for (int64_t pair = 0; pair < 4; ++pair) {
    // Codes 2 pair and 2 pair + 1 to bytes 1 and 3 (a byte permute).
    Value spread = vector::ShuffleOp::create(b, loc, load, zeros,
                                             ArrayRef<int64_t>{8, 2 * pair, 8, 2 * pair + 1});
    Value word = vector::BitCastOp::create(b, loc, VectorType::get({1}, b.getI32Type()), spread);
    regs.push_back(codePairAsBf16(vector::ExtractOp::create(b, loc, word, ArrayRef<int64_t>{0})));
  }
  return regs;
}

SmallVector<Value> Kernel::loadRow8(Value row, Value k) {
  if (!codesGiven())
    return load8(a, {row, k});
  auto codesType = VectorType::get({8}, b.getI8Type());
  auto load = vector::LoadOp::create(b, loc, codesType, a, ValueRange{row, k});
  load.setAlignment(uint64_t(8));
  Value scale = memref::LoadOp::create(
      b, loc, codeScales, ValueRange{row, arith::DivUIOp::create(b, loc, k, idx(codeGroup))});
  Value decoded = decodeE4m3(b, loc, load);
  Value splat = vector::BroadcastOp::create(b, loc, VectorType::get({8}, b.getF32Type()), scale);
  Value values = arith::MulFOp::create(b, loc, decoded, splat);
  Value rounded = arith::TruncFOp::create(b, loc, VectorType::get({8}, b.getBF16Type()), values);
  Value bits = vector::BitCastOp::create(b, loc, VectorType::get({4}, b.getI32Type()), rounded);
  SmallVector<Value> regs;
  for (int64_t i = 0; i < 4; ++i)
    regs.push_back(vector::ExtractOp::create(b, loc, bits, ArrayRef<int64_t>{i}));
  return regs;
}

/// Codes in bytes 1 and 3 of `word` as an i32 of two bf16 (the first in the
/// low half): their exact values. Each half is a code shifted by 8; its sign
/// stays at bit 15 and its exponent and mantissa (4 + 3 bits) go to bits
/// 4-10, which makes the bf16 of the code times 2^-120 (bf16's exponent bias
/// is 127, E4M3's 7; a code of exponent 0, subnormal in E4M3, becomes a
/// subnormal bf16 with the same factor). A bf16 multiply by 2^120 makes it
/// exact and normal.
Value Kernel::codePairAsBf16(Value word) {
  Value sign = arith::AndIOp::create(b, loc, word, i32(0x80008000));
  Value shifted = arith::ShRUIOp::create(b, loc, word, i32(4));
  Value magnitude = arith::AndIOp::create(b, loc, shifted, i32(0x07F007F0));
  Value bits = arith::OrIOp::create(b, loc, sign, magnitude);
  auto pairType = VectorType::get({2}, b.getBF16Type());
  auto wordType = VectorType::get({1}, b.getI32Type());
  Value pair = vector::BitCastOp::create(
      b, loc, pairType, vector::BroadcastOp::create(b, loc, wordType, bits));
  auto scale = DenseElementsAttr::get(
      pairType, b.getFloatAttr(b.getBF16Type(), std::ldexp(1.0, 120)).getValue());
  pair = arith::MulFOp::create(b, loc, pair, arith::ConstantOp::create(b, loc, scale));
  Value out = vector::BitCastOp::create(b, loc, wordType, pair);
  return vector::ExtractOp::create(b, loc, out, ArrayRef<int64_t>{0});
}

/// 16 bytes (8 of depth) at `indices` as four i32 registers.
SmallVector<Value> Kernel::load8(Value buffer, ValueRange indices) {
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
void Kernel::decodeProducts(DecodeShape shape, Value tid, Value warp, Value lane, Value rowStart,
                            Value col0, Value expert, Value partials, Value split) {
  Value group = arith::DivUIOp::create(b, loc, lane, idx(4));
  Value quadOffset = mul(arith::RemUIOp::create(b, loc, lane, idx(4)), idx(8));
  // The warps take turns along the depth, a step each, so that together
  // they read warps x 64 contiguous bytes of each weight row at a time
  // (fewer DRAM pages opened than a contiguous share per warp).
  Value kBegin = mul(warp, idx(shape.stepDepth()));
  Value kEnd = idx(depth);
  if (shape.splits > 1) {
    int64_t splitDepth = depth / shape.splits;
    kBegin = add(mul(split, idx(splitDepth)), kBegin);
    Value next = add(split, idx(1));
    kEnd = mul(next, idx(splitDepth));
  }
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
      b, loc, kBegin, kEnd, idx(shape.warps * shape.stepDepth()), init,
      [&](OpBuilder &nb, Location, Value k0, ValueRange acc) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
        SmallVector<Value> next(acc.begin(), acc.end());
        // Every load of the step first: more of them in flight.
        SmallVector<SmallVector<Value>> a0, a1, w;
        for (int64_t c = 0; c < shape.chunks; ++c) {
          Value k = add(add(k0, idx(32 * c)), quadOffset);
          a0.push_back(loadRow8(readRow0, k));
          a1.push_back(loadRow8(readRow1, k));
          for (int64_t j = 0; j < shape.tiles; ++j) {
            Value n = add(col0, add(idx(8 * j), group));
            if (fp8())
              w.push_back(loadCodes8(this->w, {expert, n, k}));
            else
              w.push_back(expert ? load8(this->w, {expert, n, k}) : load8(this->w, {n, k}));
          }
        }
        // FP8 weights: the step (within one scale block) sums into zeros,
        // added times the block's scale.
        SmallVector<Value> step = fp8() ? SmallVector<Value>(next.size(), zero) : next;
        for (int64_t c = 0; c < shape.chunks; ++c)
          for (int64_t h = 0; h < 2; ++h)
            for (int64_t j = 0; j < shape.tiles; ++j) {
              ArrayRef<Value> wRegs = w[shape.tiles * c + j];
              mma(step, j,
                  ValueRange{a0[c][2 * h], a1[c][2 * h], a0[c][2 * h + 1], a1[c][2 * h + 1]},
                  ValueRange{wRegs[2 * h], wRegs[2 * h + 1]});
            }
        if (!fp8()) {
          scf::YieldOp::create(b, loc, step);
          return;
        }
        Value scaleRow = arith::DivUIOp::create(b, loc, col0, idx(scaleRows));
        Value scaleCol = arith::DivUIOp::create(b, loc, k0, idx(scaleDepth));
        Value scale =
            memref::LoadOp::create(b, loc, wScales, ValueRange{expert, scaleRow, scaleCol});
        for (size_t i = 0; i < next.size(); ++i)
          next[i] = arith::AddFOp::create(b, loc, next[i],
                                          arith::MulFOp::create(b, loc, step[i], scale));
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
      if (shape.splits > 1) {
        memref::StoreOp::create(b, loc, sum, depthPartials,
                                ValueRange{split, outRow, add(col0, col)});
        return;
      }
      if (!element.isF32())
        sum = arith::TruncFOp::create(b, loc, element, sum);
      memref::StoreOp::create(b, loc, sum, out, ValueRange{outRow, add(col0, col)});
    });
  }
}

} // namespace mlir::moe::gemm
