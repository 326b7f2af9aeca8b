//===- PackedGemmCPU.cpp - grouped GEMM for experts with many rows --------===//
//
// Experts with at least `packedMinRows` rows (prefill) take this path:
//   a scan lists the work items, one row block of `packedBlockRows` rows of
//     one expert each, so that threads split them evenly whatever the
//     routing (scf.forall over the list);
//   the rows of the block are packed transposed, as f32, into a scratch
//     buffer [sub-tiles][K][tile rows] (bf16 is widened here, once);
//   register tiles of `packedRowVectors` x vector-width rows by
//     `packedCols` weight rows: per k, the packed rows are vector loads,
//     each weight is broadcast, and the products accumulate in
//     registers along K (an outer product: no horizontal sums);
//   the tile goes out through a small buffer, row by row.
// The weights are read in HuggingFace's [E, N, K] layout, once per row block;
// each one feeds the FMAs of every row of the block. Only f32 weights: a bf16
// weight would need its own shuffle per broadcast.
//===----------------------------------------------------------------------===//
#include "CPUPatterns.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::cpu;

namespace {
class PackedGemmEmitter {
public:
  PackedGemmEmitter(OpBuilder &b, Location loc, const GemmBuffers &ops,
                    const CpuCodegenOptions &options)
      : b(b), loc(loc), ops(ops), options(options) {
    experts = ops.experts();
    cols = ops.cols();
    depth = ops.depth();
    lanes = options.vectorWidth;
    tileRows = options.packedRowVectors * lanes;
    blockRows = options.packedBlockRows;
    f32Vector = VectorType::get({lanes}, b.getF32Type());
  }

  void emit() {
    Value rows = memref::DimOp::create(b, loc, ops.a, 0);
    // sum_e ceil(m_e / blockRows) <= rows / blockRows + E.
    Value capacity = arith::AddIOp::create(
        b, loc, arith::DivUIOp::create(b, loc, rows, c(blockRows)), c(experts));
    auto listType = MemRefType::get({ShapedType::kDynamic}, b.getIndexType());
    Value itemExpert = memref::AllocOp::create(b, loc, listType, capacity);
    Value itemRow = memref::AllocOp::create(b, loc, listType, capacity);
    auto scan = scf::ForOp::create(
        b, loc, c(0), c(experts), c(1), ValueRange{c(0)},
        [&](OpBuilder &nb, Location, Value e, ValueRange count) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          Value begin = memref::LoadOp::create(b, loc, ops.rowBegin, e);
          Value end = memref::LoadOp::create(b, loc, ops.rowEnd, e);
          Value many = isPacked(begin, end);
          Value blocks = arith::DivUIOp::create(
              b, loc, arith::AddIOp::create(b, loc, arith::SubIOp::create(b, loc, end, begin),
                                            c(blockRows - 1)),
              c(blockRows));
          blocks = arith::SelectOp::create(b, loc, many, blocks, c(0));
          forLoop(b, loc, c(0), blocks, c(1), [&](Value j) {
            Value at = arith::AddIOp::create(b, loc, count[0], j);
            Value row = arith::AddIOp::create(
                b, loc, begin, arith::MulIOp::create(b, loc, j, c(blockRows)));
            memref::StoreOp::create(b, loc, e, itemExpert, at);
            memref::StoreOp::create(b, loc, row, itemRow, at);
          });
          scf::YieldOp::create(b, loc,
                               ValueRange{arith::AddIOp::create(b, loc, count[0], blocks)});
        });
    scf::ForallOp::create(
        b, loc, ArrayRef<OpFoldResult>{scan.getResult(0)}, ValueRange{}, std::nullopt,
        [&](OpBuilder &nb, Location, ValueRange ivs) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          Value expert = memref::LoadOp::create(b, loc, itemExpert, ivs[0]);
          Value begin = memref::LoadOp::create(b, loc, itemRow, ivs[0]);
          Value end = arith::MinUIOp::create(
              b, loc, arith::AddIOp::create(b, loc, begin, c(blockRows)),
              memref::LoadOp::create(b, loc, ops.rowEnd, expert));
          emitBlock(expert, begin, end);
          scf::InParallelOp::create(b, loc);
        });
  }

  /// Whether the rows [begin, end) of an expert take this path.
  Value isPacked(Value begin, Value end) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge,
                                 arith::SubIOp::create(b, loc, end, begin),
                                 c(options.packedMinRows));
  }

private:
  Value c(int64_t v) { return constIndex(b, loc, v); }

  void emitBlock(Value expert, Value begin, Value end) {
    const int64_t subTiles = blockRows / tileRows;
    const int64_t block = depthBlock();
    auto scratchType = MemRefType::get({subTiles, block, tileRows}, b.getF32Type());
    Value packed = memref::AllocOp::create(b, loc, scratchType, ValueRange{},
                                           b.getI64IntegerAttr(64));
    tileOut = memref::AllocOp::create(
        b, loc, MemRefType::get({options.packedCols, tileRows}, b.getF32Type()),
        ValueRange{}, b.getI64IntegerAttr(64));
    Value count = arith::SubIOp::create(b, loc, end, begin);
    Value whole = arith::DivUIOp::create(b, loc, count, c(tileRows));
    Value rest = arith::RemUIOp::create(b, loc, count, c(tileRows));
    // Depth blocks: the packed rows of one stay in L2; later blocks add
    // to what the earlier ones stored.
    forLoop(b, loc, c(0), c(depth), c(block), [&](Value k0) {
      kBegin = k0;
      kLength = arith::MinUIOp::create(b, loc, c(block),
                                       arith::SubIOp::create(b, loc, c(depth), k0));
      emitPack(packed, begin, end);
      // Weight rows outer: the packed block is reused by every weight row,
      // and each weight row group is read by all sub-tiles while in cache.
      forLoop(b, loc, c(0), c(cols), c(options.packedCols), [&](Value col) {
        forLoop(b, loc, c(0), whole, c(1), [&](Value tile) {
          emitTile(packed, tile, options.packedRowVectors, expert, begin, end, col);
        });
        emitRestTile(packed, whole, rest, options.packedRowVectors - 1, expert,
                     begin, end, col);
      });
    });
  }

  /// Depth of a block: the packed rows (blockRows x depth x 4 bytes) in at
  /// most packedL2Bytes. Partial sums are kept in the output, so only an f32
  /// output is split.
  int64_t depthBlock() const {
    auto out = cast<MemRefType>(ops.out.getType()).getElementType();
    int64_t fits = options.packedL2Bytes / (blockRows * 4) / lanes * lanes;
    if (!out.isF32() || fits >= depth || fits < lanes)
      return depth;
    // Even blocks: no short last block.
    int64_t parts = llvm::divideCeil(depth, fits);
    return llvm::divideCeil(llvm::divideCeil(depth, parts), lanes) * lanes;
  }

  /// The last, partial sub-tile with as few row vectors as cover its rows:
  /// `vectors + 1` of them when `rest` is over `vectors` x lanes.
  void emitRestTile(Value packed, Value tile, Value rest, int64_t vectors,
                    Value expert, Value begin, Value end, Value col) {
    Value over = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, rest,
                                       c(vectors * lanes));
    auto branch = scf::IfOp::create(b, loc, over, /*withElseRegion=*/vectors > 0);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    emitTile(packed, tile, vectors + 1, expert, begin, end, col);
    if (vectors == 0)
      return;
    b.setInsertionPointToStart(branch.elseBlock());
    emitRestTile(packed, tile, rest, vectors - 1, expert, begin, end, col);
  }

  /// packed[s, k, i] = f32(a[begin + s * tileRows + i, kBegin + k]) for k <
  /// kLength, zero past `end`.
  void emitPack(Value packed, Value begin, Value end) {
    Type element = cast<MemRefType>(ops.a.getType()).getElementType();
    Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0));
    forLoop(b, loc, c(0), c(blockRows), c(1), [&](Value i) {
      Value row = arith::AddIOp::create(b, loc, begin, i);
      Value tile = arith::DivUIOp::create(b, loc, i, c(tileRows));
      Value lane = arith::RemUIOp::create(b, loc, i, c(tileRows));
      Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, row, end);
      auto branch = scf::IfOp::create(b, loc, inside, /*withElseRegion=*/true);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(branch.thenBlock());
      forLoop(b, loc, c(0), kLength, c(1), [&](Value k) {
        Value v = memref::LoadOp::create(
            b, loc, ops.a, ValueRange{row, arith::AddIOp::create(b, loc, kBegin, k)});
        if (!element.isF32())
          v = arith::ExtFOp::create(b, loc, b.getF32Type(), v);
        memref::StoreOp::create(b, loc, v, packed, ValueRange{tile, k, lane});
      });
      b.setInsertionPointToStart(branch.elseBlock());
      forLoop(b, loc, c(0), kLength, c(1), [&](Value k) {
        memref::StoreOp::create(b, loc, zero, packed, ValueRange{tile, k, lane});
      });
    });
  }

  /// The weight w[expert, col, k] in every lane of an f32 vector.
  Value broadcastWeight(Value expert, Value col, Value k) {
    Value w = memref::LoadOp::create(b, loc, ops.w, ValueRange{expert, col, k});
    return vector::BroadcastOp::create(b, loc, f32Vector, w);
  }

  /// out[begin + tile * tileRows + i, col + j] for i < vectors x lanes, j <
  /// packedCols: the rows before `end`.
  void emitTile(Value packed, Value tile, int64_t vectors, Value expert,
                Value begin, Value end, Value col) {
    const int64_t width = options.packedCols;
    Value zero = arith::ConstantOp::create(
        b, loc, f32Vector, DenseElementsAttr::get(f32Vector, b.getF32FloatAttr(0)));
    SmallVector<Value> weightRows;
    for (int64_t j = 0; j < width; ++j)
      weightRows.push_back(j ? arith::AddIOp::create(b, loc, col, c(j)).getResult() : col);
    SmallVector<Value> init(vectors * width, zero);
    auto loop = scf::ForOp::create(
        b, loc, c(0), kLength, c(1), init,
        [&](OpBuilder &nb, Location, Value k, ValueRange acc) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          SmallVector<Value> next(acc.begin(), acc.end()), a;
          for (int64_t v = 0; v < vectors; ++v)
            a.push_back(vector::LoadOp::create(b, loc, f32Vector, packed,
                                               ValueRange{tile, k, c(v * lanes)}));
          Value kw = arith::AddIOp::create(b, loc, kBegin, k);
          for (int64_t j = 0; j < width; ++j) {
            Value w = broadcastWeight(expert, weightRows[j], kw);
            for (int64_t v = 0; v < vectors; ++v)
              next[v * width + j] =
                  vector::FMAOp::create(b, loc, a[v], w, next[v * width + j]);
          }
          scf::YieldOp::create(b, loc, next);
        });

    // acc[v * width + j][l] is out[row v * lanes + l, col + j]: the tile goes
    // through a small buffer, then the rows before `end` are copied out.
    for (int64_t v = 0; v < vectors; ++v)
      for (int64_t j = 0; j < width; ++j)
        vector::StoreOp::create(b, loc, loop.getResult(v * width + j), tileOut,
                                ValueRange{c(j), c(v * lanes)});
    Type outElement = cast<MemRefType>(ops.out.getType()).getElementType();
    Value tileBegin = arith::AddIOp::create(
        b, loc, begin, arith::MulIOp::create(b, loc, tile, c(tileRows)));
    Value rows = arith::MinUIOp::create(
        b, loc, c(vectors * lanes), arith::SubIOp::create(b, loc, end, tileBegin));
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, kBegin, c(0));
    forLoop(b, loc, c(0), rows, c(1), [&](Value i) {
      Value row = arith::AddIOp::create(b, loc, tileBegin, i);
      for (int64_t j = 0; j < width; ++j) {
        Value value = memref::LoadOp::create(b, loc, tileOut, ValueRange{c(j), i});
        SmallVector<Value, 2> at = {row, weightRows[j]};
        if (outElement.isF32()) {
          Value sum = arith::AddFOp::create(
              b, loc, memref::LoadOp::create(b, loc, ops.out, at), value);
          value = arith::SelectOp::create(b, loc, first, value, sum);
        } else {
          value = arith::TruncFOp::create(b, loc, outElement, value);
        }
        memref::StoreOp::create(b, loc, value, ops.out, at);
      }
    });
  }

  OpBuilder &b;
  Location loc;
  const GemmBuffers &ops;
  const CpuCodegenOptions &options;
  int64_t experts, cols, depth, lanes, tileRows, blockRows;
  VectorType f32Vector;
  /// The register tile on its way out, [packedCols][tile rows].
  Value tileOut;
  /// The depth block being computed: its first k and its length.
  Value kBegin, kLength;
};
} // namespace

bool cpu::usesPackedGemm(const GemmBuffers &ops, const CpuCodegenOptions &options) {
  int64_t tileRows = options.packedRowVectors * options.vectorWidth;
  // bf16 weights keep the other path: broadcasting a 16-bit weight takes
  // the shuffle port the FMAs need (measured 2x slower at T = 2048).
  auto wType = cast<MemRefType>(ops.w.getType());
  return wType.getElementType().isF32() && options.packedMinRows > 0 && tileRows > 0 &&
         options.packedBlockRows % tileRows == 0 && options.packedCols > 0 &&
         ops.cols() % options.packedCols == 0;
}

void cpu::buildPackedGemm(OpBuilder &b, Location loc, const GemmBuffers &ops,
                          const CpuCodegenOptions &options) {
  PackedGemmEmitter(b, loc, ops, options).emit();
}

Value cpu::isPackedExpert(OpBuilder &b, Location loc, const GemmBuffers &ops,
                          const CpuCodegenOptions &options, Value begin, Value end) {
  return PackedGemmEmitter(b, loc, ops, options).isPacked(begin, end);
}
