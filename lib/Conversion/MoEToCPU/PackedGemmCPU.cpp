//===- PackedGemmCPU.cpp - grouped GEMM for experts with many rows --------===//
//
// Experts with at least `packedMinRows` rows (prefill) take this path:
//   a scan lists the row blocks (up to `packedBlockRows` rows of one expert);
//     the work items are (row block, group of `packedGroupPanels` column
//     panels), so threads split them evenly whatever the routing (scf.forall);
//   per panel of 2 x vector-width weight rows, the expert's weights are packed
//     transposed into a [K][panel] f32 scratch (lanes x lanes blocks turned by
//     vector.shuffle stages; bf16 is widened and FP8 decoded here), which
//     stays in L2 while every row tile of the block uses it; with bf16 dot
//     products a [K / 2][2 x panel] bf16 scratch of pairs of depths instead;
//   register tiles of `packedTileRows` rows by the panel: per k, two vector
//     loads of the packed weights and a broadcast of each row's activation,
//     accumulated along K in 2 x packedTileRows registers (outer products: no
//     horizontal sums), then stored as whole vectors into the output rows.
// Weights stay in HuggingFace's [E, N, K] layout in memory; packing a panel
// costs one pass over its weights per row block, which the block's rows share.
//===----------------------------------------------------------------------===//
#include "CPUPatterns.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"

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
    panel = 2 * lanes;
    groupCols = options.packedGroupPanels * panel;
    blockRows = options.packedBlockRows;
    f32Vector = VectorType::get({lanes}, b.getF32Type());
    dots = packedGemmMultipliesBf16Pairs(ops, options);
    pairType = VectorType::get({2 * lanes}, b.getBF16Type());
  }

  void emit() {
    Value rows = memref::DimOp::create(b, loc, ops.a, 0);
    // sum_e ceil(m_e / blockRows) <= rows / blockRows + E.
    Value capacity = arith::AddIOp::create(
        b, loc, arith::DivUIOp::create(b, loc, rows, c(blockRows)), c(experts));
    auto listType = MemRefType::get({ShapedType::kDynamic}, b.getIndexType());
    Value blockExpert = memref::AllocOp::create(b, loc, listType, capacity);
    Value blockRow = memref::AllocOp::create(b, loc, listType, capacity);
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
            memref::StoreOp::create(b, loc, e, blockExpert, at);
            memref::StoreOp::create(b, loc, row, blockRow, at);
          });
          scf::YieldOp::create(b, loc,
                               ValueRange{arith::AddIOp::create(b, loc, count[0], blocks)});
        });
    Value blocks = scan.getResult(0);
    Value any = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, blocks, c(0));
    auto branch = scf::IfOp::create(b, loc, any, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    // bf16 activations are widened once, before the tiles broadcast them: a
    // broadcast of a 16-bit value would take the shuffle port the FMAs need.
    rowSource = ops.a;
    if (!cast<MemRefType>(ops.a.getType()).getElementType().isF32() && !dots)
      rowSource = emitWidenedRows(rows);
    // Items of one row block are adjacent, so a thread's share of them
    // mostly reads the same activation rows.
    const int64_t groups = llvm::divideCeil(cols, groupCols);
    Value items = arith::MulIOp::create(b, loc, blocks, c(groups));
    // Threads take slots, each a contiguous run of items with its own panel
    // scratch: allocated once for all of them (outside the thread loop, so
    // that it is freed; one block of the same size each call, which the
    // runtime's allocator keeps).
    const int64_t slots = options.packedSlots, block = depthBlock();
    // With bf16 dot products a panel row holds the pairs of two depths.
    const int64_t packedRows = dots ? block / 2 : block, packedCols = dots ? 2 * panel : panel;
    Type packedElement = dots ? b.getBF16Type() : b.getF32Type();
    Value scratch = memref::AllocOp::create(
        b, loc, MemRefType::get({slots, packedRows, packedCols}, packedElement), ValueRange{},
        b.getI64IntegerAttr(64));
    Value used = arith::MinUIOp::create(b, loc, items, c(slots));
    scf::ForallOp::create(
        b, loc, ArrayRef<OpFoldResult>{used}, ValueRange{}, std::nullopt,
        [&](OpBuilder &nb, Location, ValueRange ivs) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          Value slot = ivs[0];
          auto share = [&](Value s) {
            return arith::DivUIOp::create(b, loc, arith::MulIOp::create(b, loc, s, items),
                                          used);
          };
          Value first = share(slot);
          Value last = share(arith::AddIOp::create(b, loc, slot, c(1)));
          auto panelType = MemRefType::get(
              {packedRows, packedCols}, packedElement,
              StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic, {packedCols, 1}));
          Value packed = memref::SubViewOp::create(
              b, loc, panelType, scratch,
              ArrayRef<OpFoldResult>{slot, b.getIndexAttr(0), b.getIndexAttr(0)},
              ArrayRef<OpFoldResult>{b.getIndexAttr(1), b.getIndexAttr(packedRows),
                                     b.getIndexAttr(packedCols)},
              ArrayRef<OpFoldResult>{b.getIndexAttr(1), b.getIndexAttr(1), b.getIndexAttr(1)});
          forLoop(b, loc, first, last, c(1), [&](Value item) {
            Value rowBlock = arith::DivUIOp::create(b, loc, item, c(groups));
            Value group = arith::RemUIOp::create(b, loc, item, c(groups));
            Value expert = memref::LoadOp::create(b, loc, blockExpert, rowBlock);
            itemExpert = expert;
            Value begin = memref::LoadOp::create(b, loc, blockRow, rowBlock);
            Value end = arith::MinUIOp::create(
                b, loc, arith::AddIOp::create(b, loc, begin, c(blockRows)),
                memref::LoadOp::create(b, loc, ops.rowEnd, expert));
            emitItem(packed, expert, begin, end,
                     arith::MulIOp::create(b, loc, group, c(groupCols)));
          });
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

  /// The output columns [colBegin, colBegin + groupCols) of the rows
  /// [begin, end) of one expert.
  void emitItem(Value packed, Value expert, Value begin, Value end, Value colBegin) {
    const int64_t block = depthBlock();
    Value count = arith::SubIOp::create(b, loc, end, begin);
    Value whole = arith::MulIOp::create(
        b, loc, arith::DivUIOp::create(b, loc, count, c(options.packedTileRows)),
        c(options.packedTileRows));
    Value rest = arith::RemUIOp::create(b, loc, count, c(options.packedTileRows));
    Value colEnd = arith::MinUIOp::create(
        b, loc, arith::AddIOp::create(b, loc, colBegin, c(groupCols)), c(cols));
    forLoop(b, loc, colBegin, colEnd, c(panel), [&](Value col) {
      // Depth blocks: the packed panel of one stays in L2; later blocks
      // add to what the earlier ones stored.
      forLoop(b, loc, c(0), c(depth), c(block), [&](Value k0) {
        kBegin = k0;
        kLength = arith::MinUIOp::create(b, loc, c(block),
                                         arith::SubIOp::create(b, loc, c(depth), k0));
        emitPack(packed, expert, col);
        forLoop(b, loc, begin, arith::AddIOp::create(b, loc, begin, whole),
                c(options.packedTileRows), [&](Value row) {
                  emitTile(packed, row, options.packedTileRows, col, block < depth);
                });
        emitRestTile(packed, arith::AddIOp::create(b, loc, begin, whole), rest,
                     options.packedTileRows - 1, col, block < depth);
      });
    });
  }

  /// Depth of a block: the packed panel (depth x panel x 4 bytes) in at most
  /// packedPanelBytes. Partial sums are kept in the output, so only an f32
  /// output is split.
  int64_t depthBlock() const {
    auto out = cast<MemRefType>(ops.out.getType()).getElementType();
    int64_t fits = options.packedPanelBytes / (panel * (dots ? 2 : 4)) / lanes * lanes;
    // FP8 pairs are scaled per scale block inside the tiles: one depth block.
    if (dots && ops.wScales)
      return depth;
    if (!out.isF32() || fits >= depth || fits < lanes)
      return depth;
    // Even blocks: no short last block.
    int64_t parts = llvm::divideCeil(depth, fits);
    return llvm::divideCeil(llvm::divideCeil(depth, parts), lanes) * lanes;
  }

  /// An f32 copy of the activation rows, filled on threads.
  Value emitWidenedRows(Value rows) {
    Value wide = memref::AllocOp::create(
        b, loc, MemRefType::get({ShapedType::kDynamic, depth}, b.getF32Type()),
        ValueRange{rows}, b.getI64IntegerAttr(64));
    scf::ForallOp::create(
        b, loc, ArrayRef<OpFoldResult>{rows}, ValueRange{}, std::nullopt,
        [&](OpBuilder &nb, Location, ValueRange ivs) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          widenRow(b, loc, ops.a, wide, ivs[0], lanes);
          scf::InParallelOp::create(b, loc);
        });
    return wide;
  }

  /// packed[k, j] = f32(w[expert, col + j, kBegin + k]) for k < kLength.
  void emitPack(Value packed, Value expert, Value col) {
    if (dots)
      return emitPairPack(packed, expert, col);
    Value vectorEnd = packRuns(
        col, lanes,
        [&](Value row, Value from) {
          return loadWeightRow(b, loc, ops, lanes, expert, row, from, Value());
        },
        [&](Value k, int64_t half, ArrayRef<Value> block) {
          for (int64_t j = 0; j < lanes; ++j)
            vector::StoreOp::create(b, loc, block[j], packed,
                                    ValueRange{arith::AddIOp::create(b, loc, k, c(j)), c(half)});
        });
    // A depth that is not a multiple of the vector width ends element-wise.
    forLoop(b, loc, vectorEnd, kLength, c(1), [&](Value k) {
      Value from = arith::AddIOp::create(b, loc, kBegin, k);
      for (int64_t j = 0; j < panel; ++j) {
        Value row = arith::AddIOp::create(b, loc, col, c(j));
        memref::StoreOp::create(b, loc, loadWeight(b, loc, ops, expert, row, from),
                                packed, ValueRange{k, c(j)});
      }
    });
  }

  /// The whole runs of the pack: per half of the panel (lanes columns), for
  /// each `run` depths from 0, lanes weight rows from `load(row, kBegin +
  /// k)` turned by `transpose`, then `store(k, half, block)`. Returns the
  /// end of the whole runs; the rest of kLength is the caller's.
  Value packRuns(Value col, int64_t run, function_ref<Value(Value, Value)> load,
                 function_ref<void(Value, int64_t, ArrayRef<Value>)> store) {
    Value vectorEnd = arith::MulIOp::create(
        b, loc, arith::DivUIOp::create(b, loc, kLength, c(run)), c(run));
    for (int64_t half = 0; half < panel; half += lanes) {
      // lanes x lanes blocks: lanes weight rows in, lanes packed rows out.
      forLoop(b, loc, c(0), vectorEnd, c(run), [&](Value k) {
        Value from = arith::AddIOp::create(b, loc, kBegin, k);
        SmallVector<Value> block;
        for (int64_t j = 0; j < lanes; ++j) {
          Value row = arith::AddIOp::create(b, loc, col, c(half + j));
          block.push_back(load(row, from));
        }
        transpose(block);
        store(k, half, block);
      });
    }
    return vectorEnd;
  }

  /// packed[k / 2, 2 j + k % 2] = w[expert, col + j, kBegin + k] for k <
  /// kLength (even): the pairs of depths that one vdpbf16ps lane multiplies
  /// (FP8 codes as bf16 of their value times 2^-8, unscaled). A pair is 32
  /// bits, so lanes weight rows of 2 x lanes bf16 are a lanes x lanes block
  /// of i32 to transpose.
  void emitPairPack(Value packed, Value expert, Value col) {
    auto pairsAsI32 = VectorType::get({lanes}, b.getI32Type());
    Value vectorEnd = packRuns(
        col, 2 * lanes,
        [&](Value row, Value from) -> Value {
          Value w = loadPairs(expert, row, from);
          return vector::BitCastOp::create(b, loc, pairsAsI32, w);
        },
        [&](Value k, int64_t half, ArrayRef<Value> block) {
          Value pairRow = arith::DivUIOp::create(b, loc, k, c(2));
          // Named values: the order of a call's arguments is the compiler's.
          for (int64_t p = 0; p < lanes; ++p) {
            Value at = arith::AddIOp::create(b, loc, pairRow, c(p));
            Value column = c(2 * half);
            Value pairs = vector::BitCastOp::create(b, loc, pairType, block[p]);
            vector::StoreOp::create(b, loc, pairs, packed, ValueRange{at, column});
          }
        });
    forLoop(b, loc, vectorEnd, kLength, c(1), [&](Value k) {
      Value from = arith::AddIOp::create(b, loc, kBegin, k);
      Value pairRow = arith::DivUIOp::create(b, loc, k, c(2));
      Value odd = arith::RemUIOp::create(b, loc, k, c(2));
      for (int64_t j = 0; j < panel; ++j) {
        Value row = arith::AddIOp::create(b, loc, col, c(j));
        Value w = memref::LoadOp::create(b, loc, ops.w, ValueRange{expert, row, from});
        if (ops.wScales)
          w = codesAsBf16(w);
        memref::StoreOp::create(b, loc, w, packed,
                                ValueRange{pairRow, arith::AddIOp::create(b, loc, odd, c(2 * j))});
      }
    });
  }

  /// 2 x lanes weights of a row from `k` on, as bf16 (FP8 codes decoded).
  Value loadPairs(Value expert, Value row, Value k) {
    if (!ops.wScales)
      return vector::LoadOp::create(b, loc, pairType, ops.w, ValueRange{expert, row, k});
    auto codes = VectorType::get({2 * lanes}, b.getI8Type());
    return codesAsBf16(vector::LoadOp::create(b, loc, codes, ops.w, ValueRange{expert, row, k}));
  }

  /// E4M3 codes (a scalar or a vector) as bf16 of their value times 2^-8:
  /// the f32 of e4m3TimesTwoToMinus8 has at most 4 significant bits, so
  /// its upper 16 bits are that bf16, exactly.
  Value codesAsBf16(Value codes) {
    auto like = [&](Type element) -> Type {
      if (auto vector = dyn_cast<VectorType>(codes.getType()))
        return vector.clone(element);
      return element;
    };
    Value f32 = e4m3TimesTwoToMinus8(b, loc, codes);
    Value bits = arith::BitcastOp::create(b, loc, like(b.getI32Type()), f32);
    Attribute sixteen = b.getI32IntegerAttr(16);
    if (auto vector = dyn_cast<VectorType>(bits.getType()))
      sixteen = DenseElementsAttr::get(vector, sixteen);
    Value upper = arith::ShRUIOp::create(
        b, loc, bits, arith::ConstantOp::create(b, loc, cast<TypedAttr>(sixteen)));
    Value half = arith::TruncIOp::create(b, loc, like(b.getI16Type()), upper);
    return arith::BitcastOp::create(b, loc, like(b.getBF16Type()), half);
  }

  /// Transposes `rows` (lanes vectors of lanes elements, lanes a power of
  /// two) in log2(lanes) stages of two-input shuffles: the stage of bit `s`
  /// exchanges that bit between the row and the column index.
  void transpose(SmallVectorImpl<Value> &rows) {
    const int64_t n = lanes;
    for (int64_t s = n / 2; s >= 1; s /= 2) {
      SmallVector<int64_t> low, high;
      for (int64_t col = 0; col < n; ++col) {
        low.push_back(col & s ? n + (col ^ s) : col);
        high.push_back(col & s ? n + col : col ^ s);
      }
      for (int64_t r = 0; r < n; ++r) {
        if (r & s)
          continue;
        Value upper = rows[r], lower = rows[r + s];
        rows[r] = vector::ShuffleOp::create(b, loc, upper, lower, low);
        rows[r + s] = vector::ShuffleOp::create(b, loc, upper, lower, high);
      }
    }
  }

  /// The last, partial row tile, `rest` rows from `row` on: a tile of
  /// exactly `rest` rows (an scf.if per size from `rows` down to 1).
  void emitRestTile(Value packed, Value row, Value rest, int64_t rows, Value col,
                    bool accumulate) {
    if (rows == 0)
      return;
    Value exact = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, rest, c(rows));
    auto branch = scf::IfOp::create(b, loc, exact, /*withElseRegion=*/rows > 1);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    emitTile(packed, row, rows, col, accumulate);
    if (rows == 1)
      return;
    b.setInsertionPointToStart(branch.elseBlock());
    emitRestTile(packed, row, rest, rows - 1, col, accumulate);
  }

  /// out[row + i, col + j] for i < rows, j < panel over the depth block; with
  /// `accumulate`, blocks after the first add to the output.
  void emitTile(Value packed, Value row, int64_t rows, Value col, bool accumulate) {
    Value zero = arith::ConstantOp::create(
        b, loc, f32Vector, DenseElementsAttr::get(f32Vector, b.getF32FloatAttr(0)));
    SmallVector<Value> sourceRows;
    for (int64_t i = 0; i < rows; ++i)
      sourceRows.push_back(arith::AddIOp::create(b, loc, row, c(i)));
    SmallVector<Value> init(2 * rows, zero);
    scf::ForOp loop = dots ? emitPairTileLoop(packed, sourceRows, init, col)
                           : emitF32TileLoop(packed, sourceRows, init);
    storeTile(loop, row, rows, col, accumulate);
  }

  /// The register tile's loop on an f32 panel: per depth, two vectors of the
  /// panel and per row a broadcast activation.
  scf::ForOp emitF32TileLoop(Value packed, ArrayRef<Value> sourceRows, ValueRange init) {
    return scf::ForOp::create(
        b, loc, c(0), kLength, c(1), init,
        [&](OpBuilder &nb, Location, Value k, ValueRange acc) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          SmallVector<Value> next(acc.begin(), acc.end());
          Value w0 = vector::LoadOp::create(b, loc, f32Vector, packed, ValueRange{k, c(0)});
          Value w1 = vector::LoadOp::create(b, loc, f32Vector, packed, ValueRange{k, c(lanes)});
          Value kx = arith::AddIOp::create(b, loc, kBegin, k);
          for (size_t i = 0; i < sourceRows.size(); ++i) {
            Value x = memref::LoadOp::create(b, loc, rowSource, ValueRange{sourceRows[i], kx});
            Value xs = vector::BroadcastOp::create(b, loc, f32Vector, x);
            next[2 * i] = vector::FMAOp::create(b, loc, xs, w0, next[2 * i]);
            next[2 * i + 1] = vector::FMAOp::create(b, loc, xs, w1, next[2 * i + 1]);
          }
          scf::YieldOp::create(b, loc, next);
        });
  }

  /// The register tile's loop with bf16 dot products: per pair of depths,
  /// each row's pair of activations (one 32-bit broadcast) times the two
  /// vectors of packed weight pairs.
  scf::ForOp emitPairTileLoop(Value packed, ArrayRef<Value> sourceRows, ValueRange init,
                              Value col) {
    if (ops.wScales)
      return emitScaledPairTileLoop(packed, sourceRows, init, col);
    Value first = c(0);
    Value last = arith::DivUIOp::create(b, loc, kLength, c(2));
    return emitPairSteps(packed, sourceRows, init, first, last);
  }

  /// FP8 weights: per scale block along the depth, the pair steps on fresh
  /// accumulators, then added times the block's scale (one per panel: the
  /// blocks' rows are a multiple of the panel).
  scf::ForOp emitScaledPairTileLoop(Value packed, ArrayRef<Value> sourceRows, ValueRange init,
                                    Value col) {
    Value zero = init.front();
    return scf::ForOp::create(
        b, loc, c(0), kLength, c(ops.blockCols), init,
        [&](OpBuilder &nb, Location, Value kb, ValueRange acc) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          Value kbEnd = arith::MinUIOp::create(
              b, loc, arith::AddIOp::create(b, loc, kb, c(ops.blockCols)), kLength);
          Value first = arith::DivUIOp::create(b, loc, kb, c(2));
          Value last = arith::DivUIOp::create(b, loc, kbEnd, c(2));
          auto block = emitPairSteps(packed, sourceRows, SmallVector<Value>(acc.size(), zero),
                                     first, last);
          Value scale = vector::BroadcastOp::create(
              b, loc, f32Vector,
              weightBlockScale(b, loc, ops, itemExpert, col,
                               arith::AddIOp::create(b, loc, kBegin, kb)));
          SmallVector<Value> next;
          for (size_t i = 0; i < acc.size(); ++i)
            next.push_back(vector::FMAOp::create(b, loc, block.getResult(i), scale, acc[i]));
          scf::YieldOp::create(b, loc, next);
        });
  }

  /// The pair steps [first, last) of the register tile.
  scf::ForOp emitPairSteps(Value packed, ArrayRef<Value> sourceRows, ValueRange init,
                           Value first, Value last) {
    auto pairsAsI32 = VectorType::get({lanes}, b.getI32Type());
    auto twoBf16 = VectorType::get({2}, b.getBF16Type());
    auto oneI32 = VectorType::get({1}, b.getI32Type());
    return scf::ForOp::create(
        b, loc, first, last, c(1), init,
        [&](OpBuilder &nb, Location, Value kk, ValueRange acc) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          SmallVector<Value> next(acc.begin(), acc.end());
          Value w0 = vector::LoadOp::create(b, loc, pairType, packed, ValueRange{kk, c(0)});
          Value w1 = vector::LoadOp::create(b, loc, pairType, packed, ValueRange{kk, c(2 * lanes)});
          Value kx = arith::AddIOp::create(
              b, loc, kBegin, arith::MulIOp::create(b, loc, kk, c(2)));
          for (size_t i = 0; i < sourceRows.size(); ++i) {
            Value pair = vector::LoadOp::create(b, loc, twoBf16, rowSource,
                                                ValueRange{sourceRows[i], kx});
            Value bits = vector::ExtractOp::create(
                b, loc, vector::BitCastOp::create(b, loc, oneI32, pair), ArrayRef<int64_t>{0});
            Value xs = vector::BitCastOp::create(
                b, loc, pairType, vector::BroadcastOp::create(b, loc, pairsAsI32, bits));
            next[2 * i] = x86vector::DotBF16Op::create(b, loc, f32Vector, next[2 * i], xs, w0);
            next[2 * i + 1] =
                x86vector::DotBF16Op::create(b, loc, f32Vector, next[2 * i + 1], xs, w1);
          }
          scf::YieldOp::create(b, loc, next);
        });
  }

  /// The register tile's accumulators (2 per row) to the output.
  void storeTile(scf::ForOp loop, Value row, int64_t rows, Value col, bool accumulate) {
    Type outElement = cast<MemRefType>(ops.out.getType()).getElementType();
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, kBegin, c(0));
    for (int64_t i = 0; i < rows; ++i) {
      Value outRow = arith::AddIOp::create(b, loc, row, c(i));
      for (int64_t h = 0; h < 2; ++h) {
        Value value = loop.getResult(2 * i + h);
        SmallVector<Value, 2> at = {outRow, arith::AddIOp::create(b, loc, col, c(h * lanes))};
        if (accumulate) {
          // Only f32 outputs are split in depth (depthBlock).
          Value old = vector::LoadOp::create(b, loc, f32Vector, ops.out, at);
          Value sum = arith::AddFOp::create(b, loc, old, value);
          value = arith::SelectOp::create(b, loc, first, value, sum);
        } else if (!outElement.isF32()) {
          value = arith::TruncFOp::create(b, loc, VectorType::get({lanes}, outElement), value);
        }
        vector::StoreOp::create(b, loc, value, ops.out, at);
      }
    }
  }

  OpBuilder &b;
  Location loc;
  const GemmBuffers &ops;
  const CpuCodegenOptions &options;
  int64_t experts, cols, depth, lanes, panel, groupCols, blockRows;
  VectorType f32Vector;
  /// bf16 rows and weights multiplied by vdpbf16ps: the panel holds bf16
  /// pairs (pairType: 2 x lanes bf16) and the rows are read as they are.
  bool dots = false;
  VectorType pairType;
  /// The activation rows the tiles broadcast from: `a` (f32, or bf16 with
  /// dots) or its f32 copy.
  Value rowSource;
  /// The depth block being computed: its first k and its length.
  Value kBegin, kLength;
  /// The expert of the work item being emitted.
  Value itemExpert;
};
} // namespace

bool cpu::packedGemmMultipliesBf16Pairs(const GemmBuffers &ops,
                                        const CpuCodegenOptions &options) {
  auto element = [](Value v) { return cast<MemRefType>(v.getType()).getElementType(); };
  if (!options.bf16Dot || options.vectorWidth != 16 || !element(ops.a).isBF16() ||
      ops.depth() % 2 != 0)
    return false;
  if (!ops.wScales)
    return element(ops.w).isBF16();
  return ops.blockCols % 2 == 0 && ops.blockRows % (2 * options.vectorWidth) == 0;
}

bool cpu::usesPackedGemm(const GemmBuffers &ops, const CpuCodegenOptions &options) {
  // The pack turns lanes x lanes blocks with shuffle stages: a power of two.
  int64_t lanes = options.vectorWidth;
  return options.packedMinRows > 0 && lanes >= 2 && llvm::isPowerOf2_64(lanes) &&
         options.packedTileRows > 0 && options.packedBlockRows >= options.packedTileRows &&
         options.packedGroupPanels > 0 && ops.cols() % (2 * lanes) == 0;
}

void cpu::buildPackedGemm(OpBuilder &b, Location loc, const GemmBuffers &ops,
                          const CpuCodegenOptions &options) {
  PackedGemmEmitter(b, loc, ops, options).emit();
}

Value cpu::isPackedExpert(OpBuilder &b, Location loc, const GemmBuffers &ops,
                          const CpuCodegenOptions &options, Value begin, Value end) {
  return PackedGemmEmitter(b, loc, ops, options).isPacked(begin, end);
}
