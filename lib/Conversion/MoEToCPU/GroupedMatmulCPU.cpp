//===- GroupedMatmulCPU.cpp - grouped GEMMs as tiled, vectorized, threaded loops ===//
//
// The strategy, outermost first:
//   scf.forall over work items (column block, expert): threads; the column
//     block is the outer index, so a static split across threads gives each
//     thread its share of every expert's columns.
//   row blocks of `rowBlock` rows of the expert (its rows stay in L2),
//   register-cols weight rows at a time (their K-panel stays in L1/L2),
//   register tiles of register-rows rows by register-cols weight rows whose
//     reduction over K runs on vector<vector-width x f32> accumulators with
//     vector.fma; one horizontal sum per output element at the end.
// Experts with fewer rows than a register tile (decode) instead read their
// weights a row at a time in memory order, each dot product on
// decodeAccumulators interleaved accumulators.
// Experts with at least `packedMinRows` rows are left to the packed GEMM
// (PackedGemmCPU.cpp), which this emits after its own loop.
// Weights are read in HuggingFace's [E, N, K] layout: both operands are
// contiguous along K, so no packing step is needed. bf16 operands are
// widened to f32 in registers (a shift of the 16 bits), so a bf16 layer
// reads half the bytes, or, with `bf16Dot`, multiplied as pairs by
// vdpbf16ps without widening; FP8 weights (E4M3 codes with block scales) are
// decoded in registers too, a quarter of the bytes. FP8 rows (from an FP8
// dispatch), and bf16 rows that meet FP8 weights, become f32 once per call.
//===----------------------------------------------------------------------===//
#include "CPUPatterns.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::cpu;

namespace {
/// Emits the loops of one grouped GEMM.
class GemmEmitter {
public:
  GemmEmitter(OpBuilder &b, Location loc, const GemmBuffers &ops,
              const CpuCodegenOptions &options)
      : b(b), loc(loc), ops(ops), options(options) {
    experts = ops.experts();
    cols = ops.cols();
    depth = ops.depth();
    lanes = options.vectorWidth;
    f32Vector = VectorType::get({lanes}, b.getF32Type());
  }

  void emit() {
    // The packed GEMM may take bf16 rows as they are (pairs for vdpbf16ps).
    GemmBuffers packedOps = ops;
    if (!packedGemmMultipliesBf16Pairs(packedOps, options))
      packedOps.a = Value();
    if (ops.aScales ||
        (ops.wScales && !cast<MemRefType>(ops.a.getType()).getElementType().isF32()))
      widenExpertRows();
    packed = usesPackedGemm(ops, options);
    int64_t columnBlocks = llvm::divideCeil(cols, options.columnBlock);
    Value items = constIndex(b, loc, columnBlocks * experts);
    scf::ForallOp::create(
        b, loc, ArrayRef<OpFoldResult>{items}, ValueRange{}, std::nullopt,
        [&](OpBuilder &nb, Location nl, ValueRange ivs) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          emitWorkItem(ivs[0]);
          scf::InParallelOp::create(b, loc);
        });
    if (packed) {
      if (!packedOps.a)
        packedOps = ops;
      buildPackedGemm(b, loc, packedOps, options);
    }
  }

private:
  Value c(int64_t v) { return constIndex(b, loc, v); }

  /// FP8 rows (from an FP8 dispatch) are decoded to f32 once, and so are
  /// bf16 rows that meet FP8 weights, so that the dot products spend their
  /// vector operations on the weights (each row meets every weight row of
  /// its expert). Rows of no expert are left unset: no GEMM reads them.
  void widenExpertRows() {
    Value rows = memref::DimOp::create(b, loc, ops.a, 0);
    Value wide = memref::AllocOp::create(
        b, loc, MemRefType::get({ShapedType::kDynamic, depth}, b.getF32Type()),
        ValueRange{rows}, b.getI64IntegerAttr(64));
    forLoop(c(0), c(experts), c(1), [&](Value expert) {
      Value begin = memref::LoadOp::create(b, loc, ops.rowBegin, expert);
      Value end = memref::LoadOp::create(b, loc, ops.rowEnd, expert);
      forLoop(begin, end, c(1), [&](Value row) {
        if (ops.aScales)
          decodeFp8Row(b, loc, ops.a, ops.aScales, ops.rowGroup, wide, row, lanes);
        else
          widenRow(b, loc, ops.a, wide, row, lanes);
      });
    });
    ops.a = wide;
  }

  void emitWorkItem(Value item) {
    Value expert = arith::RemUIOp::create(b, loc, item, c(experts));
    Value block = arith::DivUIOp::create(b, loc, item, c(experts));
    Value begin = memref::LoadOp::create(b, loc, ops.rowBegin, expert);
    Value end = memref::LoadOp::create(b, loc, ops.rowEnd, expert);
    Value colBegin = arith::MulIOp::create(b, loc, block, c(options.columnBlock));
    Value colEnd = arith::MinUIOp::create(
        b, loc, arith::AddIOp::create(b, loc, colBegin, c(options.columnBlock)),
        c(cols));
    if (packed) {
      // Experts with many rows are the packed GEMM's.
      Value many = isPackedExpert(b, loc, ops, options, begin, end);
      auto skip = scf::IfOp::create(b, loc, many, /*withElseRegion=*/true);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(skip.elseBlock());
      emitSmallExpert(expert, begin, end, colBegin, colEnd);
      return;
    }
    emitSmallExpert(expert, begin, end, colBegin, colEnd);
  }

  void emitSmallExpert(Value expert, Value begin, Value end, Value colBegin,
                       Value colEnd) {
    // An expert with fewer rows than a register tile (decode) streams its
    // weights once, a weight row at a time in memory order, the expert's
    // rows dotted with it while it is in L1.
    Value few = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                      arith::SubIOp::create(b, loc, end, begin),
                                      c(options.registerRows));
    auto branch = scf::IfOp::create(b, loc, few, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(branch.thenBlock());
      auto eachRow = [&] {
        forLoop(colBegin, colEnd, c(1), [&](Value col) {
          forLoop(begin, end, c(1), [&](Value row) { emitDecodeDot(expert, row, col); });
        });
      };
      if (blockScaledDecode()) {
        // Two rows share each decoded vector of codes (the decode, not
        // memory, bounds this loop).
        Value count = arith::SubIOp::create(b, loc, end, begin);
        Value two = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, count, c(2));
        auto pair = scf::IfOp::create(b, loc, two, /*withElseRegion=*/true);
        OpBuilder::InsertionGuard pairGuard(b);
        b.setInsertionPointToStart(pair.thenBlock());
        Value second = arith::AddIOp::create(b, loc, begin, c(1));
        forLoop(colBegin, colEnd, c(1), [&](Value col) {
          emitBlockScaledDecodeDot(expert, {begin, second}, col);
        });
        b.setInsertionPointToStart(pair.elseBlock());
        eachRow();
      } else {
        eachRow();
      }
      b.setInsertionPointToStart(branch.elseBlock());
      emitRowBlocks(expert, begin, end, colBegin, colEnd);
    }
  }

  /// out[row, col] = a[row, :] . w[expert, col, :] on decodeAccumulators
  /// independent accumulators along the depth: one sequential stream of
  /// weights (the hardware prefetcher's best case) with enough FMAs in
  /// flight to keep up with it.
  void emitDecodeDot(Value expert, Value row, Value col) {
    if (blockScaledDecode())
      return emitBlockScaledDecodeDot(expert, {row}, col);
    const int64_t n = options.decodeAccumulators;
    const bool pairs = bothBf16();
    // Elements one accumulator takes per step.
    const int64_t chunk = pairs ? 2 * lanes : lanes;
    Value zero = arith::ConstantOp::create(
        b, loc, f32Vector, DenseElementsAttr::get(f32Vector, b.getF32FloatAttr(0)));
    // The activation's load first, then the weights' (named values: the
    // order of a call's arguments is the compiler's choice).
    auto fma = [&](Value k, Value mask, Value acc) {
      Value x = loadRow(ops.a, {row, k}, mask);
      Value w = loadWeightRow(b, loc, ops, lanes, expert, col, k, mask);
      return vector::FMAOp::create(b, loc, x, w, acc).getResult();
    };
    auto add = [&](Value k, Value acc) -> Value {
      if (!pairs)
        return fma(k, Value(), acc);
      if (options.bf16Dot) {
        Value x = loadBf16Pairs(ops.a, {row, k});
        Value w = loadBf16Pairs(ops.w, {expert, col, k});
        return dot(acc, x, w);
      }
      auto [aLow, aHigh] = loadWidePair(ops.a, {row, k});
      auto [wLow, wHigh] = loadWidePair(ops.w, {expert, col, k});
      acc = vector::FMAOp::create(b, loc, aLow, wLow, acc);
      return vector::FMAOp::create(b, loc, aHigh, wHigh, acc).getResult();
    };
    SmallVector<Value> acc(n, zero);
    int64_t steps = depth / (n * chunk) * (n * chunk);
    if (steps > 0) {
      auto loop = scf::ForOp::create(
          b, loc, c(0), c(steps), c(n * chunk), acc,
          [&](OpBuilder &nb, Location, Value k, ValueRange iter) {
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
            SmallVector<Value> next;
            for (int64_t j = 0; j < n; ++j)
              next.push_back(add(
                  j ? arith::AddIOp::create(b, loc, k, c(j * chunk)).getResult() : k,
                  iter[j]));
            scf::YieldOp::create(b, loc, next);
          });
      acc.assign(loop.getResults().begin(), loop.getResults().end());
    }
    // The rest: whole chunks, whole vectors, then a masked vector.
    int64_t k = steps;
    for (int64_t j = 0; k + chunk <= depth; k += chunk, j = (j + 1) % n)
      acc[j] = add(c(k), acc[j]);
    for (int64_t j = 0; k + lanes <= depth; k += lanes, j = (j + 1) % n)
      acc[j] = fma(c(k), Value(), acc[j]);
    if (k < depth) {
      auto maskType = VectorType::get({lanes}, b.getI1Type());
      Value mask = vector::ConstantMaskOp::create(
          b, loc, maskType, b.getDenseI64ArrayAttr({depth - k}));
      acc[0] = fma(c(k), mask, acc[0]);
    }
    storeDot(acc, row, col);
  }

  /// out[row, col] = the sum of the accumulators: a fixed tree, (a0 + a1) +
  /// (a2 + a3), then one horizontal sum.
  void storeDot(SmallVector<Value> acc, Value row, Value col) {
    const int64_t n = acc.size();
    for (int64_t width = 1; width < n; width *= 2)
      for (int64_t j = 0; j + width < n; j += 2 * width)
        acc[j] = arith::AddFOp::create(b, loc, acc[j], acc[j + width]);
    Value sum = vector::ReductionOp::create(b, loc, vector::CombiningKind::ADD, acc[0],
                                            arith::FastMathFlags::reassoc);
    Type outElement = cast<MemRefType>(ops.out.getType()).getElementType();
    if (!outElement.isF32())
      sum = arith::TruncFOp::create(b, loc, outElement, sum);
    memref::StoreOp::create(b, loc, sum, ops.out, ValueRange{row, col});
  }

  /// FP8 weights whose scale blocks split the depth into whole steps of the
  /// decode dot.
  bool blockScaledDecode() const {
    const int64_t step = options.decodeAccumulators * lanes;
    return ops.wScales && depth % ops.blockCols == 0 && ops.blockCols % step == 0 &&
           cast<MemRefType>(ops.a.getType()).getElementType().isF32();
  }

  /// The decode dot over FP8 weights, a scale block at a time: the block's
  /// codes are summed unscaled on fresh accumulators, which are then added
  /// to the running ones times the block's scale (one FMA per accumulator
  /// and block instead of a multiply per vector of codes). Each vector of
  /// codes is decoded once for all `rows` (one or two).
  void emitBlockScaledDecodeDot(Value expert, ArrayRef<Value> rows, Value col) {
    const int64_t n = options.decodeAccumulators, step = n * lanes;
    const int64_t count = rows.size();
    Value zero = arith::ConstantOp::create(
        b, loc, f32Vector, DenseElementsAttr::get(f32Vector, b.getF32FloatAttr(0)));
    auto codesType = VectorType::get({lanes}, cast<MemRefType>(ops.w.getType()).getElementType());
    SmallVector<Value> zeros(n * count, zero);
    auto blocks = scf::ForOp::create(
        b, loc, c(0), c(depth), c(ops.blockCols), zeros,
        [&](OpBuilder &nb, Location, Value kb, ValueRange acc) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          auto inner = scf::ForOp::create(
              b, loc, kb, arith::AddIOp::create(b, loc, kb, c(ops.blockCols)), c(step), zeros,
              [&](OpBuilder &ib, Location, Value k, ValueRange part) {
                OpBuilder::InsertionGuard innerGuard(b);
                b.setInsertionPoint(ib.getInsertionBlock(), ib.getInsertionPoint());
                // Accumulator j of row r is next[r * n + j].
                SmallVector<Value> next(part.begin(), part.end());
                for (int64_t j = 0; j < n; ++j) {
                  Value kj = j ? arith::AddIOp::create(b, loc, k, c(j * lanes)).getResult() : k;
                  SmallVector<Value> x;
                  for (Value row : rows)
                    x.push_back(loadRow(ops.a, {row, kj}, Value()));
                  Value codes = vector::LoadOp::create(b, loc, codesType, ops.w,
                                                       ValueRange{expert, col, kj});
                  Value w = e4m3TimesTwoToMinus8(b, loc, codes);
                  for (int64_t r = 0; r < count; ++r)
                    next[r * n + j] = vector::FMAOp::create(b, loc, x[r], w, next[r * n + j]);
                }
                scf::YieldOp::create(b, loc, next);
              });
          Value scale = vector::BroadcastOp::create(
              b, loc, f32Vector, weightBlockScale(b, loc, ops, expert, col, kb));
          SmallVector<Value> next;
          for (int64_t j = 0; j < n * count; ++j)
            next.push_back(vector::FMAOp::create(b, loc, inner.getResult(j), scale, acc[j]));
          scf::YieldOp::create(b, loc, next);
        });
    for (int64_t r = 0; r < count; ++r)
      storeDot(SmallVector<Value>(blocks.getResults().slice(r * n, n)), rows[r], col);
  }

  void emitRowBlocks(Value expert, Value begin, Value end, Value colBegin,
                     Value colEnd) {
    int64_t rowBlock = options.registerRows * 16;
    forLoop(begin, end, c(rowBlock), [&](Value rowStart) {
      Value rowStop = arith::MinUIOp::create(
          b, loc, arith::AddIOp::create(b, loc, rowStart, c(rowBlock)), end);
      // Rows in whole register tiles, then the rest one at a time.
      Value span = arith::SubIOp::create(b, loc, rowStop, rowStart);
      Value whole = arith::MulIOp::create(
          b, loc,
          arith::DivUIOp::create(b, loc, span, c(options.registerRows)),
          c(options.registerRows));
      Value tilesEnd = arith::AddIOp::create(b, loc, rowStart, whole);
      const int64_t block = depthBlock();
      for (int64_t k0 = 0; k0 < depth; k0 += block) {
        // Later depth blocks add to what the earlier ones stored.
        bool accumulate = k0 > 0;
        forLoop(colBegin, colEnd, c(options.registerCols), [&](Value col) {
          forLoop(rowStart, tilesEnd, c(options.registerRows), [&](Value row) {
            emitRegisterTile(expert, row, options.registerRows, col, colEnd, k0,
                             block, accumulate, options.registerCols);
          });
          forLoop(tilesEnd, rowStop, c(1), [&](Value row) {
            emitRegisterTile(expert, row, 1, col, colEnd, k0, block, accumulate,
                             options.registerCols);
          });
        });
      }
    });
  }

  /// Depth (K) per pass over a row block: the register-cols weight rows of
  /// one pass stay in L1 (at most 16 KiB), so the rows of the block stream
  /// past them. Blocks split K evenly in whole vectors; partial sums are
  /// kept in the output, so only an f32 output is split.
  int64_t depthBlock() const {
    auto out = cast<MemRefType>(ops.out.getType()).getElementType();
    auto w = cast<MemRefType>(ops.w.getType()).getElementType();
    int64_t bytes = options.registerCols * depth * (w.getIntOrFloatBitWidth() / 8);
    if (!out.isF32() || bytes <= options.l1PanelBytes)
      return depth;
    for (int64_t parts = 2; parts <= depth / lanes; ++parts)
      if (depth % (parts * lanes) == 0 && bytes / parts <= options.l1PanelBytes)
        return depth / parts;
    return depth;
  }

  void forLoop(Value lb, Value ub, Value step, function_ref<void(Value)> body) {
    cpu::forLoop(b, loc, lb, ub, step, body);
  }

  /// `lanes` elements of row `indices` of `buffer` from index `k` on, as f32;
  /// `mask` (optional) limits the read at the end of a row.
  Value loadRow(Value buffer, ValueRange indices, Value mask) {
    auto type = cast<MemRefType>(buffer.getType());
    Type element = type.getElementType();
    auto vectorType = VectorType::get({lanes}, element);
    Value v;
    if (mask) {
      Value zero = arith::ConstantOp::create(
          b, loc, vectorType, DenseElementsAttr::get(vectorType, b.getZeroAttr(element)));
      v = vector::MaskedLoadOp::create(b, loc, vectorType, buffer, indices, mask, zero);
    } else {
      v = vector::LoadOp::create(b, loc, vectorType, buffer, indices);
    }
    return widenToF32(b, loc, v);
  }

  /// acc[i] + a[2i] * w[2i] + a[2i + 1] * w[2i + 1] (vdpbf16ps).
  Value dot(Value acc, Value a, Value w) {
    return x86vector::DotBF16Op::create(b, loc, acc.getType(), acc, a, w).getResult();
  }

  /// 2 x lanes bf16 elements of a row from index `k` on, as they are.
  Value loadBf16Pairs(Value buffer, ValueRange indices) {
    return vector::LoadOp::create(b, loc, VectorType::get({2 * lanes}, b.getBF16Type()),
                                  buffer, indices);
  }

  bool bothBf16() const {
    return lanes % 4 == 0 &&
           cast<MemRefType>(ops.a.getType()).getElementType().isBF16() &&
           cast<MemRefType>(ops.w.getType()).getElementType().isBF16();
  }

  /// 2 x lanes bf16 elements of a row from index `k` on, as two f32 vectors:
  /// within each block of 8 elements (128 bits), the first 4 go to the low
  /// vector and the last 4 to the high one, each bf16 as the high half of
  /// an f32 (what x86's unpack-with-zero instructions do).
  std::pair<Value, Value> loadWidePair(Value buffer, ValueRange indices) {
    int64_t n = 2 * lanes;
    auto bf16s = VectorType::get({n}, b.getBF16Type());
    auto i16s = VectorType::get({n}, b.getI16Type());
    Value v = vector::LoadOp::create(b, loc, bf16s, buffer, indices);
    Value bits = vector::BitCastOp::create(b, loc, i16s, v);
    Value zeros = arith::ConstantOp::create(
        b, loc, i16s, DenseElementsAttr::get(i16s, b.getI16IntegerAttr(0)));
    auto half = [&](int64_t offset) {
      // Shuffle indices: [0, n) pick from `zeros`, [n, 2n) from `bits`.
      SmallVector<int64_t> mask;
      for (int64_t block = 0; block < n / 8; ++block)
        for (int64_t e = 0; e < 4; ++e) {
          mask.push_back(0);
          mask.push_back(n + block * 8 + offset + e);
        }
      Value mixed = vector::ShuffleOp::create(b, loc, zeros, bits, mask);
      return vector::BitCastOp::create(b, loc, f32Vector, mixed).getResult();
    };
    return {half(0), half(4)};
  }

  /// out[row + i, col + j] for i < rows, j < register-cols (columns clamped
  /// to colEnd - 1; the clamped duplicates are not stored).
  void emitRegisterTile(Value expert, Value row, int64_t rows, Value col,
                        Value colEnd, int64_t k0, int64_t kLength, bool accumulate,
                        int64_t tileCols) {
    const bool ragged = cols % tileCols != 0 || options.columnBlock % tileCols != 0;
    Value lastCol = arith::SubIOp::create(b, loc, colEnd, c(1));
    SmallVector<Value> rowIdx, colIdx;
    for (int64_t i = 0; i < rows; ++i)
      rowIdx.push_back(i ? arith::AddIOp::create(b, loc, row, c(i)).getResult() : row);
    for (int64_t j = 0; j < tileCols; ++j) {
      Value cj = j ? arith::AddIOp::create(b, loc, col, c(j)).getResult() : col;
      colIdx.push_back(ragged ? arith::MinUIOp::create(b, loc, cj, lastCol).getResult() : cj);
    }
    Value zero = arith::ConstantOp::create(
        b, loc, f32Vector, DenseElementsAttr::get(f32Vector, b.getF32FloatAttr(0)));
    SmallVector<Value> init(rows * tileCols, zero);
    auto step = [&](Value k, ValueRange acc, Value mask) {
      SmallVector<Value> a, next(acc.begin(), acc.end());
      for (int64_t i = 0; i < rows; ++i)
        a.push_back(loadRow(ops.a, {rowIdx[i], k}, mask));
      for (int64_t j = 0; j < tileCols; ++j) {
        Value w = loadWeightRow(b, loc, ops, lanes, expert, colIdx[j], k, mask);
        for (int64_t i = 0; i < rows; ++i)
          next[i * tileCols + j] =
              vector::FMAOp::create(b, loc, a[i], w, next[i * tileCols + j]);
      }
      return next;
    };

    // One row (rows left over in a row block), both operands bf16: 2 x
    // lanes elements per step, widened by interleaving with zeros (one
    // unpack per 8 lanes instead of an extend and a shift). The unpack permutes the elements within 128-bit blocks,
    // the same way for both operands, so the products pair up. Not for
    // whole register tiles: twice the live vectors spill (measured 1.4x
    // slower at T = 2048).
    SmallVector<Value> acc = init;
    int64_t start = k0;
    // With bf16 dot products: 2 x lanes elements per step and no widening,
    // so whole register tiles take it too.
    const bool dots = bothBf16() && options.bf16Dot;
    if (bothBf16() && (rows == 1 || dots)) {
      int64_t pairs = k0 + kLength / (2 * lanes) * (2 * lanes);
      if (pairs > k0) {
        auto loop = scf::ForOp::create(
            b, loc, c(k0), c(pairs), c(2 * lanes), init,
            [&](OpBuilder &nb, Location, Value k, ValueRange iter) {
              OpBuilder::InsertionGuard guard(b);
              b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
              SmallVector<Value> next(iter.begin(), iter.end());
              if (dots) {
                SmallVector<Value> a;
                for (int64_t i = 0; i < rows; ++i)
                  a.push_back(loadBf16Pairs(ops.a, {rowIdx[i], k}));
                for (int64_t j = 0; j < tileCols; ++j) {
                  Value w = loadBf16Pairs(ops.w, {expert, colIdx[j], k});
                  for (int64_t i = 0; i < rows; ++i)
                    next[i * tileCols + j] = dot(next[i * tileCols + j], a[i], w);
                }
                scf::YieldOp::create(b, loc, next);
                return;
              }
              SmallVector<std::pair<Value, Value>> a;
              for (int64_t i = 0; i < rows; ++i)
                a.push_back(loadWidePair(ops.a, {rowIdx[i], k}));
              for (int64_t j = 0; j < tileCols; ++j) {
                auto [wLow, wHigh] = loadWidePair(ops.w, {expert, colIdx[j], k});
                for (int64_t i = 0; i < rows; ++i) {
                  Value &sum = next[i * tileCols + j];
                  sum = vector::FMAOp::create(b, loc, a[i].first, wLow, sum);
                  sum = vector::FMAOp::create(b, loc, a[i].second, wHigh, sum);
                }
              }
              scf::YieldOp::create(b, loc, next);
            });
        acc.assign(loop.getResults().begin(), loop.getResults().end());
        start = pairs;
      }
    }
    int64_t whole = start + (k0 + kLength - start) / lanes * lanes;
    if (whole > start) {
      auto loop = scf::ForOp::create(
          b, loc, c(start), c(whole), c(lanes), acc,
          [&](OpBuilder &nb, Location, Value k, ValueRange iter) {
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
            scf::YieldOp::create(b, loc, step(k, iter, Value()));
          });
      acc.assign(loop.getResults().begin(), loop.getResults().end());
    }
    if (whole < k0 + kLength) {
      auto maskType = VectorType::get({lanes}, b.getI1Type());
      Value mask = vector::ConstantMaskOp::create(
          b, loc, maskType, b.getDenseI64ArrayAttr({k0 + kLength - whole}));
      acc = step(c(whole), acc, mask);
    }

    Type outElement = cast<MemRefType>(ops.out.getType()).getElementType();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < tileCols; ++j) {
        Value sum = vector::ReductionOp::create(
            b, loc, vector::CombiningKind::ADD, acc[i * tileCols + j],
            arith::FastMathFlags::reassoc);
        if (!outElement.isF32())
          sum = arith::TruncFOp::create(b, loc, outElement, sum);
        auto store = [&](OpBuilder &sb, Location sl) {
          SmallVector<Value, 2> at = {rowIdx[i], colIdx[j]};
          Value value = sum;
          if (accumulate)
            value = arith::AddFOp::create(
                sb, sl, memref::LoadOp::create(sb, sl, ops.out, at), sum);
          memref::StoreOp::create(sb, sl, value, ops.out, at);
        };
        if (!ragged || j == 0) {
          store(b, loc);
          continue;
        }
        Value cj = arith::AddIOp::create(b, loc, col, c(j));
        Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, cj, colEnd);
        scf::IfOp::create(b, loc, inside, [&](OpBuilder &tb, Location tl) {
          store(tb, tl);
          scf::YieldOp::create(tb, tl);
        });
      }
  }

  OpBuilder &b;
  Location loc;
  GemmBuffers ops; // a copy: FP8 weights swap in widened activations
  const CpuCodegenOptions &options;
  int64_t experts, cols, depth, lanes;
  VectorType f32Vector;
  bool packed = false;
};
} // namespace

namespace {
/// moe.grouped_matmul on the grouped layout (with expert_offsets): the
/// expert ranges first (O(rows)), zero rows that hold no expert's row, then
/// the GEMM. FP8 weights are decoded in registers; FP8 rows (with scales)
/// are decoded to f32 once per call.
struct GroupedMatmulToCPU : OpRewritePattern<GroupedMatmulOp> {
  GroupedMatmulToCPU(MLIRContext *ctx, const CpuCodegenOptions &options)
      : OpRewritePattern(ctx), options(options) {}

  LogicalResult matchAndRewrite(GroupedMatmulOp op,
                                PatternRewriter &rewriter) const override {
    if (!op.getExpertOffsets())
      return rewriter.notifyMatchFailure(op, "needs the grouped layout");
    int64_t rowGroup = 0;
    if (Value scales = op.getScales()) {
      rowGroup = op.getInput().getType().getDimSize(1) /
                 cast<RankedTensorType>(scales.getType()).getDimSize(1);
      if (rowGroup % options.vectorWidth != 0)
        return rewriter.notifyMatchFailure(
            op, "FP8 rows need scale groups of whole vectors");
    }
    std::optional<ArrayRef<int64_t>> block = op.getWeightBlock();
    if (block && (*block)[1] % options.vectorWidth != 0)
      return rewriter.notifyMatchFailure(
          op, "FP8 weights need scale blocks of whole vectors along K");
    auto inType = op.getInput().getType();
    if (ShapedType::isDynamic(inType.getDimSize(1)) ||
        llvm::any_of(op.getWeight().getType().getShape(), ShapedType::isDynamic))
      return rewriter.notifyMatchFailure(op, "needs static K, N and E");
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    auto resultType = op.getType();
    Value rows = tensor::DimOp::create(b, loc, op.getInput(), 0);
    auto outTensor = RankedTensorType::get(
        {inType.getDimSize(0), resultType.getDimSize(1)}, resultType.getElementType());
    Value out = allocBuffer(b, loc, outTensor,
                            outTensor.isDynamicDim(0) ? ValueRange{rows} : ValueRange{});
    const int64_t experts = op.getWeight().getType().getDimSize(0);
    auto indexBuffer = MemRefType::get({experts}, b.getIndexType());
    GemmBuffers ops;
    ops.a = readBuffer(b, loc, op.getInput());
    ops.w = readBuffer(b, loc, op.getWeight());
    if (Value scales = op.getScales()) {
      ops.aScales = readBuffer(b, loc, scales);
      ops.rowGroup = rowGroup;
    }
    if (Value scales = op.getWeightScales()) {
      ops.wScales = readBuffer(b, loc, scales);
      ops.blockRows = (*block)[0];
      ops.blockCols = (*block)[1];
    }
    ops.out = out;
    ops.rowBegin = memref::AllocOp::create(b, loc, indexBuffer);
    ops.rowEnd = memref::AllocOp::create(b, loc, indexBuffer);
    emitRanges(b, loc, readBuffer(b, loc, op.getExpertOffsets()),
               readBuffer(b, loc, op.getRowExpert()), ops, rows, experts);
    buildGroupedGemm(b, loc, ops, options);
    Value result = toTensor(b, loc, out, outTensor);
    if (result.getType() != resultType)
      result = tensor::CastOp::create(b, loc, resultType, result);
    rewriter.replaceOp(op, result);
    return success();
  }

  /// rowBegin[e] = offsets[e]; rowEnd[e] = the end of the rows of e at the
  /// head of its block. Padding rows and rows outside every block are zeroed.
  static void emitRanges(OpBuilder &b, Location loc, Value offsets,
                         Value rowExpert, const GemmBuffers &ops, Value rows,
                         int64_t experts) {
    Value zero = constIndex(b, loc, 0), one = constIndex(b, loc, 1);
    Type element = cast<MemRefType>(ops.out.getType()).getElementType();
    Value zeroValue = arith::ConstantOp::create(b, loc, b.getZeroAttr(element));
    auto zeroRows = [&](OpBuilder &nb, Location nl, Value from, Value to,
                        bool inLine) {
      Value lo = arith::MinUIOp::create(nb, nl, from, rows);
      Value hi = arith::MaxUIOp::create(nb, nl, lo, arith::MinUIOp::create(nb, nl, to, rows));
      Value count = arith::SubIOp::create(nb, nl, hi, lo);
      int64_t cols = cast<MemRefType>(ops.out.getType()).getDimSize(1);
      SmallVector<OpFoldResult> offsets = {lo, nb.getIndexAttr(0)};
      SmallVector<OpFoldResult> sizes = {count, nb.getIndexAttr(cols)};
      SmallVector<OpFoldResult> strides = {nb.getIndexAttr(1), nb.getIndexAttr(1)};
      Value view = memref::SubViewOp::create(nb, nl, ops.out, offsets, sizes, strides);
      if (inLine)
        fillInLine(nb, nl, view, zeroValue);
      else
        linalg::FillOp::create(nb, nl, zeroValue, view);
    };
    zeroRows(b, loc, zero, loadIndex(b, loc, offsets, constIndex(b, loc, 0)), false);
    zeroRows(b, loc, loadIndex(b, loc, offsets, constIndex(b, loc, experts)), rows,
             false);
    scf::ForOp::create(
        b, loc, zero, constIndex(b, loc, experts), one, ValueRange{},
        [&](OpBuilder &nb, Location nl, Value e, ValueRange) {
          Value lo = loadIndex(nb, nl, offsets, e);
          Value next = arith::AddIOp::create(nb, nl, e, one);
          Value hi = arith::MaxUIOp::create(nb, nl, lo, loadIndex(nb, nl, offsets, next));
          hi = arith::MinUIOp::create(nb, nl, hi, rows);
          lo = arith::MinUIOp::create(nb, nl, lo, hi);
          Value expertId = arith::IndexCastOp::create(nb, nl, nb.getI32Type(), e);
          // The rows of e lead its block: count them.
          auto count = scf::ForOp::create(
              nb, nl, lo, hi, one, ValueRange{zero},
              [&](OpBuilder &cb, Location cl, Value r, ValueRange acc) {
                Value id = memref::LoadOp::create(cb, cl, rowExpert, r);
                Value mine = arith::CmpIOp::create(cb, cl, arith::CmpIPredicate::eq, id, expertId);
                Value add = arith::SelectOp::create(cb, cl, mine, one, zero);
                scf::YieldOp::create(cb, cl, ValueRange{arith::AddIOp::create(cb, cl, acc[0], add)});
              });
          Value end = arith::AddIOp::create(nb, nl, lo, count.getResult(0));
          memref::StoreOp::create(nb, nl, lo, ops.rowBegin, e);
          memref::StoreOp::create(nb, nl, end, ops.rowEnd, e);
          // Fewer than a row tile per expert: no thread team per expert.
          zeroRows(nb, nl, end, hi, /*inLine=*/true);
          scf::YieldOp::create(nb, nl);
        });
  }

  CpuCodegenOptions options;
};
} // namespace

void cpu::populateCpuGroupedMatmulPatterns(RewritePatternSet &patterns,
                                           const CpuCodegenOptions &options) {
  patterns.add<GroupedMatmulToCPU>(patterns.getContext(), options);
}

void cpu::buildGroupedGemm(OpBuilder &b, Location loc, const GemmBuffers &operands,
                           const CpuCodegenOptions &options) {
  GemmEmitter(b, loc, operands, options).emit();
}
