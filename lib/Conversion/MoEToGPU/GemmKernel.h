//===- GemmKernel.h - the tensor-core GEMM kernels' builder -----*- C++ -*-===//
//
// The builder of the grouped (or dense) bf16 GEMM kernels, and of grouped
// GEMMs of bf16 rows with FP8 block-scaled weights: the operands,
// the helpers every form uses, and the forms, defined in GemmDecode.cpp
// (few rows per expert) and GemmPrefill.cpp (many); build() in
// GroupedMatmulGPU.cpp emits the host's choice between them.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_CONVERSION_MOETOGPU_GEMMKERNEL_H
#define MOE_CONVERSION_MOETOGPU_GEMMKERNEL_H

#include "GPUKernels.h"
#include "KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <functional>
#include <optional>
#include <string>

namespace mlir::moe::gemm {
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
/// Blocks a dense decode form that splits its depth wants: about one per
/// multiprocessor (132 on an H100 or H200).
constexpr int64_t kDecodeBlocksWanted = 128;

/// wgmma's 128-byte swizzle repeats every 8 rows of 128 bytes: its stages
/// start at a multiple of this.
constexpr int64_t kSwizzleBytes = 1024;
/// Threads of a warpgroup: 4 warps that issue one wgmma together.
constexpr int64_t kWgmmaThreads = 4 * kWarpSize;

/// A prefill block of the block and wide forms: up to `rows` rows (of one
/// expert) by `cols` columns, 4 warps of rows / 2 x cols / 2 outputs, the
/// depth staged through workgroup memory in a `stages`-deep cp.async
/// pipeline. With `wgmma` (sm_90a), each 64 rows have a warpgroup of 4
/// warps whose m64nCk16 products read both operands from the stages.
struct BlockShape {
  int64_t rows, cols, stages;
  /// Depth of a stage: 32 or 64.
  int64_t depth = kDepthStep;
  bool wgmma = false;
  /// With wgmma: the weights are FP8 codes, staged as such and decoded
  /// into one tile of bf16 per step.
  bool fp8 = false;
  /// With fp8: the rows are FP8 codes as well (quantized per 128 of depth),
  /// staged 128 codes deep (128 bytes), multiplied by e4m3 wgmma k32.
  bool fp8Rows = false;
  /// Bytes of a staged element, and depth of one wgmma (or mma.sync).
  int64_t elementBytes() const { return fp8Rows ? 1 : 2; }
  int64_t mmaDepth() const { return fp8Rows ? 32 : 16; }
  /// Elements of a staged row: for ldmatrix the depth and 8 of padding, so
  /// that its eight row addresses fall in distinct banks; for wgmma the
  /// depth alone (128 bytes, swizzled).
  int64_t stageRow() const { return wgmma ? depth : depth + 8; }
  int64_t stageRowBytes() const { return stageRow() * elementBytes(); }
  /// Bytes of one stage of the rows and of the weights, and the MMAs along
  /// a stage's depth.
  int64_t rowStageBytes() const { return rows * stageRowBytes(); }
  int64_t weightStageBytes() const { return cols * stageRowBytes(); }
  int64_t mmaSteps() const { return depth / mmaDepth(); }
  /// Threads of a block: a warpgroup per 64 rows with wgmma, else 4 warps.
  int64_t threads() const { return wgmma ? rows / 64 * kWgmmaThreads : kWideWarps * kWarpSize; }
  /// Workgroup bytes of the stages (for wgmma, and the slack that aligns
  /// them).
  int64_t sharedBytes() const {
    if (fp8Rows)
      return stages * (rows + cols) * depth + kSwizzleBytes;
    if (fp8)
      return stages * (rows * depth * 2 + cols * depth) + cols * depth * 2 + kSwizzleBytes;
    return stages * (rows + cols) * stageRow() * 2 + (wgmma ? kSwizzleBytes : 0);
  }
};

/// Columns of a wgmma block of FP8 weights: two accumulators a thread per
/// output (the scale block's sum and the total), 128 f32 registers.
constexpr int64_t kFp8BlockCols = 128;
/// Depth of one scale of FP8 rows (DeepSeek-V3's activation blocks), and
/// the step of their wgmma form.
constexpr int64_t kFp8RowGroup = 128;
/// Whether the FP8 rows form multiplies codes with a scale per `group` of
/// depth: whole e4m3 wgmma (k32) products, whole groups in a step.
constexpr bool fp8RowsTakeGroup(int64_t group) {
  return group > 0 && group % 32 == 0 && kFp8RowGroup % group == 0;
}

/// Workgroup memory a kernel may take without opting in to more; beyond
/// it the stages live in dynamic shared memory.
constexpr int64_t kStaticSharedBytes = 48 * 1024;
/// Shared memory a block may opt in to on every chip --chip takes (sm_89:
/// 99 KiB; sm_80 163 KiB, sm_90 227 KiB).
constexpr int64_t kMaxSharedBytes = 99 * 1024;
/// Shared memory a block may opt in to on sm_90a (wgmma blocks).
constexpr int64_t kMaxSharedBytesSm90 = 227 * 1024;

/// The wide form's shape (128 x 64) with stages of `depth`: at most
/// `stages`, as many as fit in kMaxSharedBytes.
BlockShape wideShapeOf(int64_t stages, int64_t depth);

/// `shape` with its columns halved until they divide `cols` (down to 64
/// for wgmma, 32 else: the narrowest block a warp layout takes), so that
/// a GEMM whose N the chosen width does not divide (gpt-oss's 5760 by 256)
/// still takes the block form.
BlockShape narrowedToDivide(BlockShape shape, int64_t cols);

/// Whether the block form can take `shape` (its stages and depth already
/// checked: checkGpuPrefillOptions): rows and cols 32, 64 or 128 (whole m16
/// tiles and n8 pairs per warp), at most 64 accumulators a thread, the
/// stages within kMaxSharedBytes. Else a message.
std::optional<std::string> checkBlockShape(BlockShape shape);

/// The decode form's block: `warps` warps share the depth of one tile's 16
/// rows by 8 * `tiles` columns; per step each lane reads `chunks` runs of 16
/// bytes (8 of depth) of each of its rows, a quad of lanes 64 contiguous
/// bytes per run.
struct DecodeShape {
  int64_t warps, tiles, chunks;
  /// Blocks along z that split the depth (Kernel::depthPartials).
  int64_t splits = 1;
  int64_t stepDepth() const { return 32 * chunks; }
};

struct Kernel : KernelBuilder {
  Value a, w, out, rowExpert, offsets; // buffers; no experts: w is [N, K]
  Value rows;                           // index: rows of a and out
  int64_t experts, cols, depth;
  /// FP8 weights: w holds E4M3 codes (i8) and wScales[e, n / scaleRows,
  /// k / scaleDepth] (f32) their block scales. None: bf16 weights.
  Value wScales = nullptr;
  int64_t scaleRows = 0, scaleDepth = 0;
  /// FP8 weights with wgmma blocks: their prefill form quantizes the rows
  /// per kFp8RowGroup of depth into rowCodes [rows, K] (E4M3) and rowScales
  /// [rows, K / kFp8RowGroup] (f32, amax / 448), and multiplies codes by
  /// codes (e4m3 wgmma) instead of decoding the weights to bf16.
  bool fp8RowsWanted = false;
  Value rowCodes = nullptr, rowScales = nullptr;
  /// Rows that arrive as FP8 codes (an FP8 dispatch's, read as they came:
  /// moe-fuse-quant-dispatch{gemm-consumes-fp8}): `a` holds E4M3 codes
  /// [rows, K] and codeScales [rows, K / codeGroup] their f32 scales. The
  /// decode form dequantizes them to bf16 as it loads them (as a receiver
  /// that dequantizes would round them); the FP8 rows prefill form
  /// multiplies them as they are (fp8RowsTakeGroup: scales per 128, or per
  /// 32 or 64 as UE8M0's). The other prefill forms take bf16 rows only:
  /// with `prefillRows` ([rows, K] bf16) a kernel first dequantizes the
  /// codes into it as the decode form rounds them (the rows used only, of
  /// a worst case), and the prefill form reads those.
  Value codeScales = nullptr;
  int64_t codeGroup = 0;
  bool dequantizeForPrefill = false;
  Value prefillRows = nullptr;
  /// The block form's shape for GEMMs of several experts (rows 0: the
  /// narrow form instead), and the wide form's.
  BlockShape blockShape{0, 0, 2};
  BlockShape wideShape{kWideRows, kWideCols, 2};
  /// The block form's table (allocateBlockTable): its entries, each
  /// block's first row and expert, and the count of blocks.
  Value tableSize, blockRow, blockExpert, blockCount;
  /// SwiGLU fused: silu(gate) * up of out's columns [0, N/2) and [N/2, N)
  /// goes to swigluOut [rows, N/2]. The wgmma block and wide forms compute
  /// it in their epilogue (a block of C columns stages C/2 gate and the
  /// matching C/2 up weight rows); the other forms write `out`, then
  /// `activateOut` runs the activation kernel.
  Value swigluOut = nullptr;
  std::function<void()> activateOut;
  /// False: every form runs activateOut after it (the activation need not
  /// be SwiGLU).
  bool swigluEpilogue = true;
  /// A dense GEMM's decode form may split the depth among S blocks along
  /// z (a router's few blocks otherwise leave most multiprocessors idle):
  /// block s writes its partial sums to depthPartials [S,
  /// kSplitMaxRowsPerExpert, N] (f32) instead of `out`, and the consumer
  /// adds them in order of s. The prefill form writes `out`.
  Value depthPartials = nullptr;
  /// While the fused prefill form is built: `out` is swigluOut, and a block
  /// of C columns from col0 stores C/2 of them from col0 / 2.
  bool fusing = false;

  /// Depth of one scale of the FP8 rows form's rows: the codes' group
  /// where they arrive as codes, else kFp8RowGroup (its own quantization).
  int64_t rowScaleGroup() const { return codesGiven() ? codeGroup : kFp8RowGroup; }

  bool grouped() const { return rowExpert != nullptr; }
  /// Static rows of a grouped GEMM are a worst case (an expert-parallel
  /// receive buffer) of which the first offsets[E] were written.
  bool worstCaseRows() const { return grouped() && !cast<MemRefType>(a.getType()).isDynamicDim(0); }
  bool fp8() const { return wScales != nullptr; }
  bool codesGiven() const { return codeScales != nullptr; }

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

  /// `proxyFence`: each thread's copies are made visible to the async
  /// proxy (wgmma's reads) before the step's barrier. `lag`: steps whose
  /// products may still read their stage when the next step begins (wgmma
  /// batches in flight). `finish`: when given, the step's copy is issued
  /// after its body (asynchronous products run while the copies issue)
  /// and `finish(step, values)` ends the step.
  using FinishStep = function_ref<void(Value, SmallVector<Value> &)>;
  ValueRange pipelinedLoop(BlockShape shape, ValueRange init,
                           function_ref<Value(Value, Value)> copyStage,
                           function_ref<void(Value, Value, int64_t, SmallVector<Value> &)> body,
                           bool proxyFence = false, int64_t lag = 0, FinishStep finish = nullptr);

  ValueRange stagedLoop(ValueRange init, function_ref<Value(Value, Value)> copyStage,
                        function_ref<void(Value, int64_t, SmallVector<Value> &)> body);

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
  /// (prefill): the block form (several experts), the wide form (one
  /// expert or none) or the narrow form (prefill()). The host chooses from
  /// the row count.
  void build();

  /// Whether the wide prefill form takes this GEMM: one expert or none.
  /// (For several experts, blocks of 128 rows lose to the block form's 64:
  /// DeepSeek-V3's routed GEMMs at T = 4096 took 20.8 + 16.1 ms on an H200
  /// against 14.4 + 8.1 ms, both 3 stages of 32: an expert's ~136 rows make
  /// a full block and a nearly empty one.)
  bool wide() const {
    return cols % wideShape.cols == 0 && depth % wideShape.depth == 0 &&
           (!grouped() || experts == 1) && fp8() == wideShape.fp8;
  }

  /// Whether the block form takes this GEMM of several experts.
  bool blocks() const {
    return grouped() && experts > 1 && fp8() == blockShape.fp8 && blockShape.rows > 0 &&
           cols % blockShape.cols == 0 && depth % blockShape.depth == 0 &&
           experts <= kMaxTableExperts;
  }

  /// FP8 weights with wgmma blocks: whether their prefill form takes them
  /// (64 x kFp8BlockCols blocks inside one scale block, whole scale blocks
  /// of depth), and then its shape.
  bool fp8PrefillApplies() const {
    const int64_t step = fp8RowsWanted ? kFp8RowGroup : blockShape.depth;
    return fp8() && blockShape.wgmma && grouped() && experts <= kMaxTableExperts &&
           cols % kFp8BlockCols == 0 && scaleRows % kFp8BlockCols == 0 && scaleDepth % step == 0 &&
           depth % scaleDepth == 0;
  }
  /// Its stages are 2 whatever bf16 takes: each step's decode, not the
  /// copies, is what waits (H200, DeepSeek-V3 T = 4096 with 128-row
  /// blocks: 31.9 ms in 2 stages, 34.8 in 3). With FP8 rows nothing is
  /// decoded: bf16's stages, each one row scale group deep.
  BlockShape fp8BlockShape() const {
    BlockShape shape = blockShape;
    shape.cols = kFp8BlockCols;
    shape.fp8 = true;
    if (fp8RowsWanted) {
      shape.fp8Rows = true;
      shape.depth = kFp8RowGroup;
    } else {
      shape.stages = 2;
    }
    return shape;
  }

  /// Whether the prefill form computes the SwiGLU in its epilogue.
  bool swigluInEpilogue() const {
    return swigluOut && swigluEpilogue && blockShape.wgmma && !blockShape.fp8 &&
           (wide() || blocks());
  }

  void prefill() {
    if (codesGiven() && prefillRows) {
      buildRowDequantizeKernel(b, loc, a, codeScales, prefillRows, rows, depth, codeGroup,
                               worstCaseRows() ? offsets : Value(), experts);
      Value codes = a, scales = codeScales;
      a = prefillRows;
      codeScales = nullptr;
      prefill();
      a = codes;
      codeScales = scales;
      return;
    }
    if (swigluInEpilogue()) {
      // The epilogue stores to swigluOut, through the same helpers.
      Value unfused = out;
      out = swigluOut;
      fusing = true;
      wide() ? launchWide() : launchBlocks();
      fusing = false;
      out = unfused;
      return;
    }
    if (blockShape.fp8Rows && !codesGiven())
      buildRowQuantizeKernel(b, loc, a, rowCodes, rowScales, rows, depth, kFp8RowGroup,
                             worstCaseRows() ? offsets : Value(), experts);
    wide() ? launchWide() : blocks() ? launchBlocks() : launch();
    if (swigluOut)
      activateOut();
  }

  /// Rows fixed at a worst case above the decode form's limit (an
  /// expert-parallel receive buffer): the rows used, offsets[E], are known
  /// on the device only, so both forms launch and each of their kernels
  /// leaves at once where offsets[E] says the other form's: the decode form
  /// at most `limit` used rows (its grid covers that many), else the
  /// prefill form.
  void launchBothForms(DecodeShape shape, int64_t limit);

  /// Wraps the body of every kernel built after `mark` in `if (offsets[E]
  /// usedIs limit)`.
  void leaveUnless(Operation *mark, arith::CmpIPredicate usedIs, int64_t limit);

  void decodeForm(DecodeShape shape) {
    launchDecode(shape);
    if (swigluOut)
      activateOut();
  }

  /// Experts the block form's table kernel takes (a thread each).
  static constexpr int64_t kMaxTableExperts = 1024;

  /// Entries of the block form's table, an upper bound on its blocks:
  /// ceil(rows / R) + E.
  Value tableEntries() {
    return add(arith::CeilDivUIOp::create(b, loc, rows, idx(blockShape.rows)), idx(experts));
  }

  /// The block form's table, allocated where the GEMM's output is (the
  /// host's choice of form comes after).
  void allocateBlockTable();

  /// The block form: a kernel fills the table of blocks (up to R rows of
  /// one expert each), then a block per entry and C columns.
  void launchBlocks();

  /// A launch of 4 warps a block on a grid of gridX x gridY whose body
  /// gets the stages of `shape`'s rows and weight rows: workgroup
  /// attributions up to kStaticSharedBytes, views of dynamic shared memory
  /// beyond.
  void launchStaged(BlockShape shape, Value gridX, Value gridY,
                    function_ref<void(gpu::LaunchOp, ValueRange tiles)> body);

  /// The wide prefill form of a GEMM of one expert or none: a block of 4
  /// warps computes rows 128 y.. (up to 128) by 64 columns, warp (m, n) of
  /// 2 x 2 the 64 x 32 at (64 m, 32 n), its rows and weight rows pipelined
  /// through shared memory (blockProducts); with wgmma, the block form's
  /// shape (wgmmaProducts).
  void launchWide();

  /// The products of blockProducts by one warpgroup's wgmma (sm_90a):
  /// rows and weight rows land in the stages swizzled as wgmma's 128-byte
  /// mode reads them.
  void wgmmaProducts(BlockShape shape, Value tid, Value rowStart, Value rowEnd, Value col0,
                     Value expert, Value tileA, Value tileW);

  /// The weight row a fused block (`fusing`) stages as its row `row` of
  /// C: gate rows first, then the matching up rows.
  Value gateOrUpRow(BlockShape shape, Value col0, Value row);

  /// wgmmaProducts of FP8 weights (shape.fp8): their codes are staged as
  /// such, decoded each step into the one bf16 tile `tileW` (exact values);
  /// each scale block's products sum into zeros, added to the total times
  /// the block's scale.
  void wgmmaFp8Products(BlockShape shape, Value tid, Value rowStart, Value rowEnd, Value col0,
                        Value expert, Value tileA, Value tileW, Value codes);

  /// wgmmaProducts of FP8 rows and weights (shape.fp8Rows): both staged as
  /// codes, each row scale group's e4m3 m64nCk32 products (four a step
  /// with scales per 128, one with UE8M0's per 32) into zeros, added to the
  /// total times its row's scale and the weight block's.
  void wgmmaFp8RowsProducts(BlockShape shape, Value tid, Value rowStart, Value rowEnd, Value col0,
                            Value expert, Value tileA, Value tileW);

  /// The block and wide forms' products by shape: blockProducts,
  /// wgmmaProducts or wgmmaFp8Products of the staged `tiles`.
  void blockFormProducts(BlockShape shape, Value tid, Value rowStart, Value rowEnd, Value col0,
                         Value expert, ValueRange tiles);

  /// A block's products of rows [rowStart, rowEnd) (of `expert`, or none)
  /// with columns [col0, col0 + shape.cols); rows past rowEnd read its last
  /// row and are not stored.
  void blockProducts(BlockShape shape, Value tid, Value rowStart, Value rowEnd, Value col0,
                     Value expert, Value tileA, Value tileW);

  /// Four warps a block and 32 columns for a GEMM of several experts (a
  /// batch has a tile of rows for each expert it touches); eight warps
  /// for one expert or none (the shared expert, the router), whose batch
  /// has one tile of rows, and 16 columns, or 8 where 16 leave too few
  /// warps. Runs of 4 x 16 bytes a lane where the depth allows. None if
  /// the depth does not divide. (On an H200, DeepSeek-V3's routed GEMMs
  /// at T = 64 took 1.94 + 1.04 ms with 32 columns, 1.97 + 1.14 with 8,
  /// 2.31 + 1.26 with 16, and 2.5 + 1.2 with runs of 8 x 16 bytes.)
  std::optional<DecodeShape> decodeShape() const;

  /// The narrow prefill form: a block's 4 warps take 4 consecutive tiles
  /// of 16 rows of the same 32 or 64 columns. With 64 columns, where the 4
  /// tiles have one expert, each 32 of depth of the block's rows and weight
  /// rows is staged through workgroup memory (cp.async, two stages) and read
  /// by ldmatrix; elsewhere each warp loads its own fragments.
  void launch();

  /// The decode form: a block per tile of 16 rows and 8 * shape.tiles
  /// columns, its warps taking turns along the depth. Each lane
  /// loads 16 bytes of depth at a time of its A rows (g, g + 8) and weight
  /// rows (g of each n8 tile); the m16n8k16 products take them in a
  /// permuted depth order, the same for A and B (a sum does not care), so
  /// no lane exchanges anything. The warps' partial sums meet in workgroup
  /// memory, each output summed by one thread in warp order.
  void launchDecode(DecodeShape shape);

  /// Whether `row` is padding (row_expert -1).
  Value isPadding(Value row);

  /// `row`, or `other` where `row` is padding of a grouped GEMM.
  Value realRowOr(Value row, Value other);

  /// 16 bytes (8 of depth) at `indices` as four i32 registers.
  SmallVector<Value> load8(Value buffer, ValueRange indices);

  /// 8 E4M3 codes at `indices` as the four i32 registers of their bf16
  /// values, the layout of load8().
  SmallVector<Value> loadCodes8(Value buffer, ValueRange indices);
  /// 8 of depth of row `row` from k of `a` as load8() gives them: bf16
  /// rows, or (codesGiven) their codes times the group's scale, each
  /// computed in f32 and rounded to bf16.
  SmallVector<Value> loadRow8(Value row, Value k);

  /// Codes in bytes 1 and 3 of `word` as an i32 of two bf16 (the first in
  /// the low half): their exact values.
  Value codePairAsBf16(Value word);

  /// The decode form's products. Lane (g = lane / 4, q = lane % 4) holds,
  /// per run of 32 of depth at k, elements k + 8q .. k + 8q + 7 of its rows
  /// as registers r0..r3. For the two k16 products h = 0, 1 of the run, r[2h]
  /// stands for the fragment's depth 2q, 2q + 1 and r[2h + 1] for 2q + 8,
  /// 2q + 9, in A (a0/a2 of row g, a1/a3 of row g + 8) and in B alike.
  void decodeProducts(DecodeShape shape, Value tid, Value warp, Value lane, Value rowStart,
                      Value col0, Value expert, Value partials, Value split);

  /// Each warp its own tile.
  void perWarp(Value lane, Value rowStart, Value col0, int64_t blockCols, Value used,
               function_ref<void(Value)> compute);

  /// The products of the tile at rowStart with its expert's weights, or
  /// zeros past the used rows or for a tile of no expert.
  void tileOfExpert(Value rowStart, Value used, function_ref<void()> zero,
                    function_ref<void(Value)> compute);

  /// Prefill, the block's 64 rows of one expert by 64 columns: per 32 of
  /// depth, the 64 x 32 rows of `a` and of the weights go to shared memory
  /// (cp.async, two 16-byte chunks of each per thread) while the warps
  /// multiply the other stage; fragments come from ldmatrix (x4: an A
  /// fragment, or the B fragments of two n8 tiles).
  void stagedProducts(Value tid, Value warp, Value lane, Value blockRow0, Value rowStart,
                      Value col0, Value expert, Value tileA, Value tileW);

  /// Accumulators c0, c1 (row g, columns 2q, 2q+1 of each n8 tile) and c2,
  /// c3 (row g + 8) to the output, rows past the end left out.
  void storeTile(ValueRange c, Value lane, Value rowStart, Value col0, int64_t nTiles);

  /// Rows [rowStart, rowStart + 16) (those inside `rows`) of `width` columns
  /// from col0 become 0, written by `count` threads (index `thread`).
  void zeroRows(Value thread, int64_t count, Value rowStart, Value col0, int64_t width);

  /// The warp's 16 x (8 * nTiles) products over the whole depth: nTiles
  /// accumulators of four f32 each, stored by rows g and g + 8.
  void products(Value lane, Value rowStart, Value col0, int64_t nTiles, Value expert);
};
} // namespace mlir::moe::gemm

#endif // MOE_CONVERSION_MOETOGPU_GEMMKERNEL_H
