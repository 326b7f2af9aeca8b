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
//    for several experts the block form: a block per entry of a table of
//    blocks of up to 64 rows of one expert, by 128 columns, 4 warps of
//    32 x 64 (prefill-block; `narrow`: a block per 4 tiles of 16 rows by 64
//    columns, a warp per tile). They pipeline the depth through shared
//    memory by cp.async (prefill-stages of prefill-stage-depth) and read
//    fragments by ldmatrix; or (prefill-mma=wgmma, sm_90a) both forms take
//    blocks of 64 rows by C columns whose warpgroup's wgmma.mma_async reads
//    the swizzled stages itself (GemmWgmma.cpp).
//
// FP8 E4M3 weights with block scales (`weight_scales`, blocks of 32k rows)
// take the decode form, decoding the codes to bf16 in registers
// (GemmDecode.cpp); with wgmma, at many rows a prefill form that decodes
// them into shared memory, or (fp8-rows) quantizes the rows too and
// multiplies codes by codes (GemmWgmma.cpp).
//
// A tile's expert is `row_expert` of its first row; padding rows are zero.
// The same kernels without experts compute a dense bf16 GEMM with f32
// results: the router's logits (RouteGPU.cpp, `moe-gpu-router-matmul`).
//
//===----------------------------------------------------------------------===//
#include "GPUKernels.h"
#include "GemmKernel.h"
#include "moe/Conversion/Passes.h"
#include "moe/Conversion/ReadBuffer.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/Transforms/Passes.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/Support/FormatVariadic.h"

namespace mlir::moe {
#define GEN_PASS_DEF_CONVERTMOETOGPU
#define GEN_PASS_DEF_MOEGPUROUTERMATMUL
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::gemm;

/// The decode form where the rows per expert are few (and the depth divides),
/// else a prefill form; the host chooses from the row count.
void gemm::Kernel::build() {
  if (blocks())
    allocateBlockTable();
  if (blockShape.fp8Rows && codesGiven()) {
    rowCodes = a;
    rowScales = codeScales;
  } else if (codesGiven() && dequantizeForPrefill) {
    auto codesType = cast<MemRefType>(a.getType());
    prefillRows =
        memref::AllocOp::create(b, loc, MemRefType::get(codesType.getShape(), b.getBF16Type()),
                                codesType.isDynamicDim(0) ? ValueRange{rows} : ValueRange{});
  } else if (blockShape.fp8Rows) {
    rowCodes = memref::AllocOp::create(
        b, loc, MemRefType::get({ShapedType::kDynamic, depth}, b.getI8Type()), ValueRange{rows});
    rowScales = memref::AllocOp::create(
        b, loc, MemRefType::get({ShapedType::kDynamic, depth / kFp8RowGroup}, b.getF32Type()),
        ValueRange{rows});
  }
  std::optional<DecodeShape> decode = decodeShape();
  if (!decode) {
    prefill();
    return;
  }
  // FP8 weights take the decode form at every row count, but for a
  // prefill form by wgmma (its codes staged, decoded in shared memory).
  if (fp8() && !blockShape.fp8) {
    decodeForm(*decode);
    return;
  }
  // Rows per expert: N - E * 15 of the padded rows are choices.
  int64_t perExpert = kSplitMaxRowsPerExpert;
  int64_t limitRows = grouped() ? experts * (perExpert + kTileRows - 1) : perExpert;
  int64_t staticRows = cast<MemRefType>(a.getType()).getDimSize(0);
  if (grouped() && !ShapedType::isDynamic(staticRows) && staticRows > limitRows) {
    launchBothForms(*decode, limitRows);
    return;
  }
  Value limit = idx(limitRows);
  auto choice = scf::IfOp::create(
      b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ule, rows, limit),
      /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(choice.thenBlock());
  decodeForm(*decode);
  b.setInsertionPointToStart(choice.elseBlock());
  prefill();
}

/// The ops `b` built in its block after `mark` (null: from the start).
static auto builtSince(OpBuilder &b, Operation *mark) {
  Block *block = b.getInsertionBlock();
  return llvm::make_range(mark ? std::next(mark->getIterator()) : block->begin(),
                          b.getInsertionPoint());
}

void gemm::Kernel::leaveUnless(Operation *mark, arith::CmpIPredicate usedIs, int64_t limit) {
  SmallVector<gpu::LaunchOp> launches;
  for (Operation &op : builtSince(b, mark))
    op.walk([&](gpu::LaunchOp launch) { launches.push_back(launch); });
  OpBuilder::InsertionGuard guard(b);
  for (gpu::LaunchOp launch : launches) {
    Block &body = launch.getBody().front();
    b.setInsertionPointToStart(&body);
    Value used = loadIndex(offsets, idx(experts));
    Value runs = cmp(usedIs, used, idx(limit));
    auto form = scf::IfOp::create(b, loc, runs, /*withElseRegion=*/false);
    Block *then = form.thenBlock();
    then->getOperations().splice(then->getTerminator()->getIterator(), body.getOperations(),
                                 std::next(form->getIterator()),
                                 body.getTerminator()->getIterator());
  }
}

void gemm::Kernel::launchBothForms(DecodeShape shape, int64_t limit) {
  auto lastBuilt = [&]() -> Operation * {
    Block *block = b.getInsertionBlock();
    return b.getInsertionPoint() == block->begin() ? nullptr : &*std::prev(b.getInsertionPoint());
  };
  // The decode form's grid covers the rows it may be given, limit of them.
  Operation *mark = lastBuilt();
  Value allRows = rows;
  rows = idx(limit);
  decodeForm(shape);
  rows = allRows;
  leaveUnless(mark, arith::CmpIPredicate::ule, limit);
  mark = lastBuilt();
  prefill();
  leaveUnless(mark, arith::CmpIPredicate::ugt, limit);
}

void mlir::moe::nameSideStreamKernels(bool marked, Operation *before, Operation *end) {
  if (!marked)
    return;
  Block *block = end->getBlock();
  auto name = FlatSymbolRefAttr::get(end->getContext(), kSideStreamKernel);
  for (Operation &op : llvm::make_range(before ? std::next(before->getIterator()) : block->begin(),
                                        end->getIterator()))
    op.walk([&](gpu::LaunchOp launch) { launch.setFunctionAttr(name); });
}

int64_t mlir::moe::denseDecodeMaxRows() { return kSplitMaxRowsPerExpert; }

bool mlir::moe::denseTensorCoreGemmApplies(int64_t cols, int64_t depth) {
  return cols % kWarpCols == 0 && depth % kDepthStep == 0;
}

Value mlir::moe::buildDenseTensorCoreGemm(OpBuilder &b, Location loc, Value a, Value w, Value out,
                                          Value rows, int64_t cols, int64_t depth,
                                          bool splitDepth) {
  Kernel kernel{{b, loc}, a, w, out, Value(), Value(), rows, 0, cols, depth};
  std::optional<DecodeShape> decode = kernel.decodeShape();
  if (splitDepth && decode) {
    // Doubles the splits while the blocks are too few and each split's
    // depth still gives every warp whole steps of 32.
    int64_t blocks = cols / (8 * decode->tiles), splits = 1;
    while (blocks * splits < kDecodeBlocksWanted &&
           depth % (2 * splits * decode->warps * kDepthStep) == 0)
      splits *= 2;
    if (splits > 1)
      kernel.depthPartials = memref::AllocOp::create(
          b, loc, MemRefType::get({splits, kSplitMaxRowsPerExpert, cols}, b.getF32Type()));
  }
  kernel.build();
  return kernel.depthPartials;
}

/// The block form's shape of prefill-block `block` (rows 0: narrow); none
/// if it is neither narrow nor RxC.
static std::optional<BlockShape> parseBlockShape(StringRef block, int64_t stages,
                                                 int64_t stageDepth, StringRef mma) {
  BlockShape shape{0, 0, stages, stageDepth, mma == "wgmma"};
  if (block == "narrow")
    return shape;
  auto [rows, cols] = block.split('x');
  if (rows.getAsInteger(10, shape.rows) || cols.getAsInteger(10, shape.cols) || shape.rows <= 0 ||
      shape.cols <= 0)
    return std::nullopt;
  return shape;
}

std::optional<std::string> mlir::moe::checkGpuPrefillOptions(StringRef block, int64_t stages,
                                                             int64_t stageDepth, StringRef mma) {
  if (mma != "mma-sync" && mma != "wgmma")
    return ("prefill-mma=" + mma + ": mma-sync or wgmma").str();
  if (stages < 2 || stages > 4)
    return llvm::formatv("prefill-stages={0}: 2 to 4 stages", stages).str();
  if (stageDepth != 32 && stageDepth != 64)
    return llvm::formatv("prefill-stage-depth={0}: a stage's depth must be 32 or 64", stageDepth)
        .str();
  std::optional<BlockShape> shape = parseBlockShape(block, stages, stageDepth, mma);
  std::optional<std::string> error;
  if (!shape)
    error = "expected narrow or RxC of positive sizes, e.g. 64x128";
  else if (shape->wgmma && shape->rows == 0)
    error = "prefill-mma=wgmma takes an RxC block";
  else if (shape->rows > 0)
    error = checkBlockShape(*shape);
  if (error)
    return ("prefill-block=" + block + ": " + *error).str();
  return std::nullopt;
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

/// Lowers `op` to its kernels, or says why not; with `fuse` (a SwiGLU
/// moe.activation of op's result), replaces `fuse` by the activation's
/// result and erases `op`: a SwiGLU in the wgmma epilogue, or with
/// `usedRowsOnly` any activation after the GEMM, over the rows used only.
LogicalResult lowerGroupedMatmul(GroupedMatmulOp op, PatternRewriter &rewriter,
                                 BlockShape blockShape, BlockShape wideShape, bool fp8Rows,
                                 ActivationOp fuse = nullptr, bool usedRowsOnly = false) {
  auto inType = op.getInput().getType();
  auto wType = op.getWeight().getType();
  if (!op.getExpertOffsets())
    return rewriter.notifyMatchFailure(op, "needs the grouped layout");
  bool fp8Weights = op.getWeightScales() != nullptr;
  // Rows as an FP8 dispatch's codes with their scales (checked below).
  const bool codes = op.getScales() != nullptr;
  if (!(codes ? inType.getElementType().isInteger(8) : inType.getElementType().isBF16()) ||
      !(fp8Weights ? wType.getElementType().isInteger(8) : wType.getElementType().isBF16()))
    return rewriter.notifyMatchFailure(op, "bf16 rows or FP8 codes, bf16 or FP8 weights only");
  if (!wType.hasStaticShape() || inType.isDynamicDim(1))
    return rewriter.notifyMatchFailure(op, "needs static E, N and K");
  int64_t cols = wType.getDimSize(1), depth = wType.getDimSize(2);
  if (cols % kWarpCols != 0 || depth % kDepthStep != 0)
    return rewriter.notifyMatchFailure(op, "N must be a multiple of 32 and K of 32");
  if (!tilesHoldOneExpert(op))
    return rewriter.notifyMatchFailure(op, "rows not padded to tiles of 16 per expert");
  int64_t scaleRows = 0, scaleDepth = 0;
  if (fp8Weights) {
    scaleRows = (*op.getWeightBlock())[0];
    scaleDepth = (*op.getWeightBlock())[1];
  }
  // The fields that choose the kernel's forms, decided before any op is
  // built.
  Kernel forms{{rewriter, op.getLoc()},
               {},
               {},
               {},
               op.getRowExpert(),
               {},
               {},
               wType.getDimSize(0),
               cols,
               depth,
               op.getWeightScales(),
               scaleRows,
               scaleDepth};
  forms.blockShape = narrowedToDivide(blockShape, cols);
  forms.wideShape = narrowedToDivide(wideShape, cols);
  if (fp8Weights) {
    // A block's columns (at most 32) and each warp's step of depth (32,
    // 64 or 128) within one scale block.
    if (scaleRows % kWarpCols != 0 || !forms.decodeShape())
      return rewriter.notifyMatchFailure(
          op, "FP8 scale blocks must be whole multiples of 32 rows and 32 of depth");
    forms.fp8RowsWanted = fp8Rows;
    if (forms.fp8PrefillApplies())
      forms.blockShape = forms.wideShape = forms.fp8BlockShape();
  }

  if (fuse && !usedRowsOnly && (!blockShape.wgmma || fp8Weights || codes))
    return rewriter.notifyMatchFailure(op, "SwiGLU fuses into wgmma blocks of bf16 weights");
  int64_t codeGroup = 0;
  bool dequantizeForPrefill = false;
  if (codes) {
    // The decode form dequantizes codes as it loads them (groups of 8 or
    // more); the prefill form that decodes FP8 weights stages bf16 rows,
    // the FP8 rows form codes of groups of its own depth.
    auto scalesType = cast<RankedTensorType>(op.getScales().getType());
    const int64_t groups = scalesType.getDimSize(1);
    codeGroup = groups > 0 && depth % groups == 0 ? depth / groups : 0;
    // (FP8 weights by mma.sync take the decode form at every row count.)
    if (codeGroup == 0 || codeGroup % 8 != 0 ||
        (forms.blockShape.fp8Rows && !fp8RowsTakeGroup(codeGroup)))
      return rewriter.notifyMatchFailure(
          op, "FP8 rows take scales per 8 or more of depth, and per 32, 64 or 128 with fp8-rows "
              "for the prefill form of wgmma blocks");
    dequantizeForPrefill = !forms.blockShape.fp8Rows && !(fp8Weights && !forms.blockShape.fp8);
  }

  Location loc = op.getLoc();
  OpBuilder &b = rewriter;
  Operation *before = op->getPrevNode();
  Value rows = tensor::DimOp::create(b, loc, op.getInput(), 0);
  auto outType = MemRefType::get({inType.getDimSize(0), cols}, b.getBF16Type());
  Value out = memref::AllocOp::create(b, loc, outType,
                                      outType.isDynamicDim(0) ? ValueRange{rows} : ValueRange{});
  Kernel kernel{{b, loc},
                readBuffer(b, loc, op.getInput()),
                readBuffer(b, loc, op.getWeight()),
                out,
                readBuffer(b, loc, op.getRowExpert()),
                readBuffer(b, loc, op.getExpertOffsets()),
                rows,
                wType.getDimSize(0),
                cols,
                depth};
  kernel.blockShape = forms.blockShape;
  kernel.wideShape = forms.wideShape;
  if (fp8Weights) {
    kernel.wScales = readBuffer(b, loc, op.getWeightScales());
    kernel.scaleRows = scaleRows;
    kernel.scaleDepth = scaleDepth;
    kernel.fp8RowsWanted = fp8Rows;
  }
  if (codes) {
    kernel.codeScales = readBuffer(b, loc, op.getScales());
    kernel.codeGroup = codeGroup;
    kernel.dequantizeForPrefill = dequantizeForPrefill;
  }
  if (fuse) {
    auto swigluType = MemRefType::get({inType.getDimSize(0), cols / 2}, b.getBF16Type());
    kernel.swigluOut = memref::AllocOp::create(
        b, loc, swigluType, swigluType.isDynamicDim(0) ? ValueRange{rows} : ValueRange{});
    kernel.swigluEpilogue = !usedRowsOnly;
    kernel.activateOut = [&] {
      buildActivationKernel(b, loc, fuse, out, kernel.swigluOut, rows,
                            usedRowsOnly ? kernel.offsets : Value(), kernel.experts);
    };
  }
  kernel.build();
  nameSideStreamKernels(op->hasAttr(kSideStreamAttr) || (fuse && fuse->hasAttr(kSideStreamAttr)),
                        before, op);
  Value result = fuse ? kernel.swigluOut : out;
  auto resultType = cast<MemRefType>(result.getType());
  result = bufferization::ToTensorOp::create(
      b, loc, RankedTensorType::get(resultType.getShape(), b.getBF16Type()), result,
      /*restrict=*/true, /*writable=*/true);
  Type wanted = fuse ? fuse.getType() : op.getType();
  if (result.getType() != wanted)
    result = tensor::CastOp::create(b, loc, wanted, result);
  if (!fuse) {
    rewriter.replaceOp(op, result);
    return success();
  }
  rewriter.replaceOp(fuse, result);
  rewriter.eraseOp(op);
  return success();
}

/// A pattern on `Op` that lowers grouped GEMMs with the pass's forms.
template <typename Op> struct WithGemmForms : OpRewritePattern<Op> {
  WithGemmForms(MLIRContext *context, BlockShape blockShape, BlockShape wideShape, bool fp8Rows)
      : OpRewritePattern<Op>(context), blockShape(blockShape), wideShape(wideShape),
        fp8Rows(fp8Rows) {}

  BlockShape blockShape;
  BlockShape wideShape;
  bool fp8Rows;
};

struct GroupedMatmulToGPU : WithGemmForms<GroupedMatmulOp> {
  using WithGemmForms::WithGemmForms;

  LogicalResult matchAndRewrite(GroupedMatmulOp op, PatternRewriter &rewriter) const override {
    return lowerGroupedMatmul(op, rewriter, blockShape, wideShape, fp8Rows);
  }
};

/// A SwiGLU moe.activation of a grouped GEMM's bf16 result (its only use),
/// whose prefill form takes wgmma blocks: the GEMM's kernels with the
/// activation in the wgmma epilogue (the decode form is followed by the
/// activation kernel).
struct FusedSwigluToGPU : OpRewritePattern<ActivationOp> {
  FusedSwigluToGPU(MLIRContext *context, BlockShape blockShape, BlockShape wideShape)
      : OpRewritePattern(context), blockShape(blockShape), wideShape(wideShape) {}

  BlockShape blockShape;
  BlockShape wideShape;

  LogicalResult matchAndRewrite(ActivationOp op, PatternRewriter &rewriter) const override {
    auto gemm = op.getInput().getDefiningOp<GroupedMatmulOp>();
    if (op.getKind() != Activation::swiglu || !gemm || !gemm->hasOneUse())
      return rewriter.notifyMatchFailure(op, "not the SwiGLU of a grouped GEMM's only use");
    if (!blockShape.wgmma || op.getType().isDynamicDim(1))
      return rewriter.notifyMatchFailure(op, "fuses into wgmma blocks");
    rewriter.setInsertionPoint(gemm);
    return lowerGroupedMatmul(gemm, rewriter, blockShape, wideShape, /*fp8Rows=*/false, op);
  }
};

/// The moe.activation of a grouped GEMM's result (its only use) whose rows
/// are a static worst case (an expert-parallel receive buffer): lowered
/// with the GEMM, its kernel taking only the rows used (offsets[E], read
/// on the device) where it would take every worst-case row.
struct WorstCaseActivationToGPU : WithGemmForms<ActivationOp> {
  using WithGemmForms::WithGemmForms;

  LogicalResult matchAndRewrite(ActivationOp op, PatternRewriter &rewriter) const override {
    auto gemm = op.getInput().getDefiningOp<GroupedMatmulOp>();
    if (!gemm || !gemm->hasOneUse() || gemm.getInput().getType().isDynamicDim(0) ||
        op.getType().isDynamicDim(1))
      return rewriter.notifyMatchFailure(op, "not a grouped GEMM's only use, of static rows");
    rewriter.setInsertionPoint(gemm);
    return lowerGroupedMatmul(gemm, rewriter, blockShape, wideShape, fp8Rows, op,
                              /*usedRowsOnly=*/true);
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
  using ConvertMoEToGPUBase::ConvertMoEToGPUBase;

  /// prefill-block, prefill-stages and prefill-stage-depth as the block
  /// form's shape (rows 0: narrow), or an error naming the option.
  FailureOr<BlockShape> blockShape() {
    if (std::optional<std::string> error =
            checkGpuPrefillOptions(prefillBlock, prefillStages, prefillStageDepth, prefillMma)) {
      emitError(getOperation()->getLoc()) << "convert-moe-to-gpu: " << *error;
      return failure();
    }
    return *parseBlockShape(prefillBlock, prefillStages, prefillStageDepth, prefillMma);
  }

  void runOnOperation() override {
    FailureOr<BlockShape> shape = blockShape();
    if (failed(shape))
      return signalPassFailure();
    // The GEMMs first: whether their rows come in tiles of one expert is
    // read off the moe.dispatch that the second step replaces.
    // wgmma blocks serve one expert (the shared one) as well.
    BlockShape wide = shape->wgmma ? *shape : wideShapeOf(prefillStages, prefillStageDepth);
    auto lowerActivationsWith = [&](auto pattern) {
      RewritePatternSet patterns(&getContext());
      patterns.add(std::move(pattern));
      SmallVector<Operation *> activations;
      getOperation()->walk([&](ActivationOp op) { activations.push_back(op); });
      return applyOpPatternsGreedily(activations, std::move(patterns));
    };
    if ((fuseSwiglu && failed(lowerActivationsWith(
                           std::make_unique<FusedSwigluToGPU>(&getContext(), *shape, wide)))) ||
        failed(lowerActivationsWith(
            std::make_unique<WorstCaseActivationToGPU>(&getContext(), *shape, wide, fp8Rows))))
      return signalPassFailure();
    RewritePatternSet gemmPatterns(&getContext());
    gemmPatterns.add<GroupedMatmulToGPU>(&getContext(), *shape, wide, fp8Rows);
    SmallVector<Operation *> gemms, others;
    getOperation()->walk([&](Operation *op) {
      if (isa<GroupedMatmulOp>(op))
        gemms.push_back(op);
      if (isa<RouteOp, DispatchOp, ActivationOp, CombineOp>(op))
        others.push_back(op);
    });
    RewritePatternSet patterns(&getContext());
    populateRouteToGPUPatterns(patterns);
    populateDispatchToGPUPatterns(patterns);
    populateElementwiseToGPUPatterns(patterns);
    if (failed(applyOpPatternsGreedily(gemms, std::move(gemmPatterns))) ||
        failed(applyOpPatternsGreedily(others, std::move(patterns))))
      return signalPassFailure();
    // A GEMM of FP8 rows left over has no other lowering for the GPU.
    WalkResult left = getOperation()->walk([&](GroupedMatmulOp op) {
      if (!op.getScales())
        return WalkResult::advance();
      Type weights = cast<ShapedType>(op.getWeight().getType()).getElementType();
      if (!weights.isBF16() && !weights.isInteger(8) && !isa<Float8E4M3FNType>(weights)) {
        op.emitOpError("convert-moe-to-gpu: the GEMM of an FP8 dispatch's codes takes bf16 or "
                       "FP8 weights, got ")
            << weights
            << " weights; compile the layer in bf16, or dequantize on receipt "
               "(moe-fuse-quant-dispatch{gemm-consumes-fp8=false})";
        return WalkResult::interrupt();
      }
      op.emitOpError("convert-moe-to-gpu: the GEMM of an FP8 dispatch's codes needs scales "
                     "per 8 or more of depth, and per 32, 64 or 128 where the FP8 rows "
                     "prefill form (fp8-rows) multiplies them; else dequantize on receipt "
                     "(moe-fuse-quant-dispatch{gemm-consumes-fp8=false})");
      return WalkResult::interrupt();
    });
    if (left.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
