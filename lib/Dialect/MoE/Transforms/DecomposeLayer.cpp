//===- DecomposeLayer.cpp - split moe.layer into its steps ----------------===//
#include "moe/Dialect/MoE/Analysis/PhasePlan.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEDECOMPOSELAYER
#include "moe/Dialect/MoE/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
RankedTensorType withShape(Value like, ArrayRef<int64_t> shape) {
  return cast<RankedTensorType>(like.getType()).clone(shape);
}

/// The expert weights of a layer and how their GEMMs are joined.
struct ExpertWeights {
  Value w13, w2;
  Value w13Bias, w2Bias; // gpt-oss; null for the others
  LayerOp layer;         // for the activation and its parameters
  // FP8 weights: block scales of w13 and w2, and the block shape.
  Value w13Scale, w2Scale;
  DenseI64ArrayAttr block;
};

Value toF32(OpBuilder &b, Location loc, Value v) {
  Type f32 = b.getF32Type();
  return v.getType() == f32 ? v : arith::ExtFOp::create(b, loc, f32, v).getResult();
}

/// `body(matrix[r, c] in f32, row[r])` for every element of the 2-D
/// `matrix`, rounded to its element type. `rowMap` reads `row`'s element of
/// row r ((r) for a vector, (r, 0) for a column).
Value mapElements(ImplicitLocOpBuilder &b, Value matrix, Value row, AffineMap rowMap,
                  llvm::function_ref<Value(OpBuilder &, Location, Value, Value)> body) {
  auto type = cast<RankedTensorType>(matrix.getType());
  MLIRContext *ctx = b.getContext();
  AffineMap identity = AffineMap::getMultiDimIdentityMap(2, ctx);
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, b.getLoc(), matrix);
  Value init = tensor::EmptyOp::create(b, sizes, type.getElementType());
  return linalg::GenericOp::create(
             b, init.getType(), ValueRange{matrix, row}, ValueRange{init},
             ArrayRef<AffineMap>{identity, rowMap, identity},
             ArrayRef<utils::IteratorType>{utils::IteratorType::parallel,
                                           utils::IteratorType::parallel},
             [&](OpBuilder &nb, Location loc, ValueRange args) {
               Value v = body(nb, loc, toF32(nb, loc, args[0]), args[1]);
               if (args[2].getType() != v.getType())
                 v = arith::TruncFOp::create(nb, loc, args[2].getType(), v);
               linalg::YieldOp::create(nb, loc, ValueRange{v});
             })
      .getResult(0);
}

/// out[r, m] + bias[rowExpert[r], m] for rows of an expert in [0, E), in f32,
/// rounded to out's element type; other rows (padding, other ranks') as they
/// are.
Value addExpertBias(ImplicitLocOpBuilder &b, Value out, Value rowExpert, Value bias) {
  int64_t experts = cast<RankedTensorType>(bias.getType()).getDimSize(0);
  AffineMap rowMap = AffineMap::get(2, 0, {b.getAffineDimExpr(0)}, b.getContext());
  return mapElements(
      b, out, rowExpert, rowMap, [&](OpBuilder &nb, Location loc, Value v, Value expert) {
        Value zero = arith::ConstantOp::create(nb, loc, nb.getI32IntegerAttr(0));
        Value count = arith::ConstantOp::create(nb, loc, nb.getI32IntegerAttr(experts));
        // Named first: argument order is unspecified in C++.
        Value atLeastZero =
            arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::sge, expert, zero);
        Value belowCount =
            arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::slt, expert, count);
        Value valid = arith::AndIOp::create(nb, loc, atLeastZero, belowCount);
        Value clamped = arith::SelectOp::create(nb, loc, valid, expert, zero);
        Value column = linalg::IndexOp::create(nb, loc, 1);
        Value row = arith::IndexCastOp::create(nb, loc, nb.getIndexType(), clamped);
        Value biasValue = tensor::ExtractOp::create(nb, loc, bias, ValueRange{row, column});
        Value sum = arith::AddFOp::create(nb, loc, v, toF32(nb, loc, biasValue));
        return arith::SelectOp::create(nb, loc, valid, sum, v).getResult();
      });
}

/// The activation of the rows the experts use: the first offsets[E] rows
/// (packed layout; with expert parallelism the rest are choices of other
/// ranks, three quarters of the rows on 4 ranks). The other rows of the
/// result are left unwritten: the down GEMM reads only its experts' rows.
Value activateUsedRows(ImplicitLocOpBuilder &b, Value gateUp, Value offsets,
                       int64_t width, LayerOp layer) {
  auto type = cast<RankedTensorType>(gateUp.getType());
  auto activate = [&](Value input) -> Value {
    auto inputType = cast<RankedTensorType>(input.getType());
    return ActivationOp::create(
        b, RankedTensorType::get({inputType.getDimSize(0), width}, type.getElementType()),
        input, layer.getActivationAttr(), layer.getSwigluAlphaAttr(),
        layer.getSwigluLimitAttr());
  };
  // A static row count is the masked (decode) layout, whose rows are all
  // its experts', or a test's shape (a static 0 rows has no slice).
  if (!offsets || !type.isDynamicDim(0))
    return activate(gateUp);
  int64_t experts = cast<RankedTensorType>(offsets.getType()).getDimSize(0) - 1;
  Value end = arith::IndexCastOp::create(
      b, b.getIndexType(),
      tensor::ExtractOp::create(b, offsets,
                                ValueRange{arith::ConstantIndexOp::create(b, experts)}));
  SmallVector<OpFoldResult> zero(2, b.getIndexAttr(0)), one(2, b.getIndexAttr(1));
  Value used = tensor::ExtractSliceOp::create(
      b, RankedTensorType::get({ShapedType::kDynamic, type.getDimSize(1)}, type.getElementType()),
      gateUp, zero, SmallVector<OpFoldResult>{end, b.getIndexAttr(type.getDimSize(1))}, one);
  Value rows = tensor::DimOp::create(b, gateUp, 0);
  Value all = tensor::EmptyOp::create(
      b, SmallVector<OpFoldResult>{rows, b.getIndexAttr(width)}, type.getElementType());
  return tensor::InsertSliceOp::create(
      b, activate(used), all, zero, SmallVector<OpFoldResult>{end, b.getIndexAttr(width)}, one);
}

/// gate/up GEMM, activation, down GEMM over rows whose expert is `rowExpert`.
/// `everyRowUsed`: no row lies past the experts' (the shared expert).
Value buildExpertMLP(ImplicitLocOpBuilder &b, Value rows, Value rowExpert,
                     Value offsets, ExpertWeights w, bool everyRowUsed = false) {
  int64_t n = cast<RankedTensorType>(rows.getType()).getDimSize(0);
  auto w13Shape = cast<RankedTensorType>(w.w13.getType()).getShape();
  auto w2Shape = cast<RankedTensorType>(w.w2.getType()).getShape();
  Value gateUp = GroupedMatmulOp::create(b, withShape(rows, {n, w13Shape[1]}), rows,
                                         w.w13, rowExpert, /*scales=*/Value(),
                                         w.w13Scale, offsets, w.block);
  if (w.w13Bias)
    gateUp = addExpertBias(b, gateUp, rowExpert, w.w13Bias);
  Value act = activateUsedRows(b, gateUp, everyRowUsed ? Value() : offsets,
                               w13Shape[1] / 2, w.layer);
  Value out = GroupedMatmulOp::create(b, withShape(rows, {n, w2Shape[1]}), act, w.w2,
                                      rowExpert, /*scales=*/Value(), w.w2Scale,
                                      offsets, w.block);
  if (w.w2Bias)
    out = addExpertBias(b, out, rowExpert, w.w2Bias);
  return out;
}

/// The shared expert as a one-expert grouped GEMM over all tokens.
Value buildSharedExpert(ImplicitLocOpBuilder &b, LayerOp layer) {
  Value x = layer.getX();
  auto addExpertDim = [&](Value w) -> Value {
    auto type = cast<RankedTensorType>(w.getType());
    auto expanded =
        type.clone({1, type.getDimSize(0), type.getDimSize(1)});
    return tensor::ExpandShapeOp::create(
        b, expanded, w, SmallVector<ReassociationIndices>{{0, 1}, {2}});
  };
  SmallVector<OpFoldResult> tokens = {tensor::getMixedSize(b, b.getLoc(), x, 0)};
  Value empty = tensor::EmptyOp::create(b, tokens, b.getI32Type());
  Value zero = arith::ConstantOp::create(b, b.getI32IntegerAttr(0));
  Value allZero = linalg::FillOp::create(b, zero, empty).getResult(0);
  // One expert owning every row: offsets [0, T].
  Value tokenCount = arith::IndexCastOp::create(
      b, b.getI32Type(), tensor::DimOp::create(b, x, 0));
  Value offsets = tensor::FromElementsOp::create(
      b, RankedTensorType::get({2}, b.getI32Type()), ValueRange{zero, tokenCount});
  return buildExpertMLP(b, x, allZero, offsets,
                        {addExpertDim(layer.getSharedW13()),
                         addExpertDim(layer.getSharedW2()), Value(), Value(), layer},
                        /*everyRowUsed=*/true);
}

/// Qwen2-MoE's gate on the shared expert: `shared[t] * sigmoid(gate . x[t])`,
/// the dot product and the sigmoid in f32.
Value gateSharedExpert(ImplicitLocOpBuilder &b, Value x, Value gate, Value shared) {
  Type f32 = b.getF32Type();
  MLIRContext *ctx = b.getContext();
  AffineExpr t, h;
  bindDims(ctx, t, h);
  SmallVector<OpFoldResult> tokens = {tensor::getMixedSize(b, b.getLoc(), x, 0)};
  Value zero = arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f));
  Value logits = linalg::FillOp::create(b, zero, tensor::EmptyOp::create(b, tokens, f32).getResult())
                     .getResult(0);
  logits = linalg::GenericOp::create(
               b, logits.getType(), ValueRange{x, gate}, ValueRange{logits},
               ArrayRef<AffineMap>{AffineMap::get(2, 0, {t, h}, ctx),
                                   AffineMap::get(2, 0, {b.getAffineConstantExpr(0), h}, ctx),
                                   AffineMap::get(2, 0, {t}, ctx)},
               ArrayRef<utils::IteratorType>{utils::IteratorType::parallel,
                                             utils::IteratorType::reduction},
               [&](OpBuilder &nb, Location loc, ValueRange args) {
                 Value product = arith::MulFOp::create(nb, loc, toF32(nb, loc, args[0]),
                                                       toF32(nb, loc, args[1]));
                 linalg::YieldOp::create(
                     nb, loc, ValueRange{arith::AddFOp::create(nb, loc, args[2], product)});
               })
               .getResult(0);
  return mapElements(b, shared, logits, AffineMap::get(2, 0, {t}, ctx),
                     [](OpBuilder &nb, Location loc, Value v, Value logit) -> Value {
                       Value one = arith::ConstantOp::create(nb, loc, nb.getF32FloatAttr(1.0f));
                       Value negated = arith::NegFOp::create(nb, loc, logit);
                       Value sigmoid = arith::DivFOp::create(
                           nb, loc, one,
                           arith::AddFOp::create(nb, loc, one,
                                                 math::ExpOp::create(nb, loc, negated)));
                       return arith::MulFOp::create(nb, loc, v, sigmoid);
                     });
}

/// x[t] * weights[t, 0] (top_k = 1), in f32, rounded to x's element type.
Value scaleTokens(ImplicitLocOpBuilder &b, Value x, Value weights) {
  AffineMap firstWeight = AffineMap::get(
      2, 0, {b.getAffineDimExpr(0), b.getAffineConstantExpr(0)}, b.getContext());
  return mapElements(b, x, weights, firstWeight,
                     [](OpBuilder &nb, Location loc, Value v, Value w) -> Value {
                       return arith::MulFOp::create(nb, loc, v, w);
                     });
}

struct MoEDecomposeLayerPass
    : moe::impl::MoEDecomposeLayerBase<MoEDecomposeLayerPass> {
  using Base::Base;

  void runOnOperation() override {
    if (rowTile < 1 || rowTile > 1024) {
      getOperation()->emitError("moe-decompose-layer: row-tile must be in [1, 1024], got ")
          << int64_t(rowTile);
      return signalPassFailure();
    }
    SmallVector<LayerOp> layers;
    getOperation()->walk([&](LayerOp op) { layers.push_back(op); });
    for (LayerOp layer : layers) {
      if (failed(decompose(layer)))
        return signalPassFailure();
      ++numLayers;
    }
  }

  /// The shared expert's output (gated where the layer has a gate); with
  /// shared-first its GEMMs and activation carry kSideStreamAttr.
  Value buildShared(ImplicitLocOpBuilder &b, LayerOp layer) {
    Operation *before = b.getInsertionPoint() == b.getBlock()->begin()
                            ? nullptr
                            : &*std::prev(b.getInsertionPoint());
    Value shared = buildSharedExpert(b, layer);
    if (Value gate = layer.getSharedGate())
      shared = gateSharedExpert(b, layer.getX(), gate, shared);
    if (!sharedFirst)
      return shared;
    Block::iterator from = before ? std::next(before->getIterator()) : b.getBlock()->begin();
    for (Operation &op : llvm::make_range(from, b.getInsertionPoint()))
      if (isa<GroupedMatmulOp, ActivationOp>(op))
        op.setAttr(kSideStreamAttr, UnitAttr::get(op.getContext()));
    return shared;
  }

  LogicalResult decompose(LayerOp layer) {
    ImplicitLocOpBuilder b(layer.getLoc(), layer);
    Value x = layer.getX();
    auto xType = layer.getX().getType();
    int64_t tokens = xType.getDimSize(0);
    int64_t topK = layer.getRouting().getTopK();
    int64_t experts = layer.getRouterWeight().getType().getDimSize(0);
    // Built first, the shared expert depends on x alone and can run beside
    // everything up to the sum.
    Value sharedFirstOut = sharedFirst && layer.getSharedW13() ? buildShared(b, layer) : Value();

    auto i32 = b.getI32Type();
    auto route = RouteOp::create(
        b, RankedTensorType::get({tokens, topK}, i32),
        RankedTensorType::get({tokens, topK}, b.getF32Type()), x,
        layer.getRouterWeight(), layer.getCorrectionBias(), layer.getRouterBias(),
        layer.getRoutingAttr());

    // With ep > 1 the experts see the rows other ranks sent here; their
    // ids are local and -1 marks choices computed elsewhere. The decode
    // layout has static shapes all the way: ep * max_tokens received rows,
    // then a fixed capacity per expert.
    const bool decode = layer.getPhase() == Phase::decode;
    const int64_t ep = layer.getLayout().getEp();
    Value expertInput = x, ids = route.getExpertIds(),
          weights = route.getExpertWeights(), handle;
    if (layer.getScoreInput()) {
      // Llama 4 (top_k = 1): the expert sees w * x; its output is not weighted.
      expertInput = scaleTokens(b, x, weights);
      SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, b.getLoc(), weights);
      Value one = arith::ConstantOp::create(b, b.getF32FloatAttr(1.0f));
      weights = linalg::FillOp::create(
                    b, one, tensor::EmptyOp::create(b, sizes, b.getF32Type()).getResult())
                    .getResult(0);
    }
    int64_t localExperts = experts / ep;
    if (Value slots = layer.getPhysToLog())
      localExperts = cast<RankedTensorType>(slots.getType()).getDimSize(0) / ep;
    DecodeLayout fixed;
    if (decode) {
      LayerShape shape;
      shape.experts = localExperts * ep;
      shape.ep = ep;
      // layer_c11 keeps the layout in range; a failure here is a verifier gap.
      std::optional<DecodeLayout> layout =
          decodeLayout(shape, *layer.getMaxTokensPerRank());
      if (!layout)
        return layer.emitError("moe-decompose-layer: the decode layout's sizes "
                               "overflow");
      fixed = *layout;
    }
    if (ep > 1) {
      int64_t maxTokens = *layer.getMaxTokensPerRank();
      int64_t received = decode           ? fixed.receivedRows
                         : staticReceived ? maxTokens * ep
                                          : ShapedType::kDynamic;
      auto exchange = EpDispatchOp::create(
          b, xType.clone({received, xType.getDimSize(1)}), /*received_scales=*/Type(),
          RankedTensorType::get({received, topK}, i32),
          RankedTensorType::get({received, topK}, b.getF32Type()), b.getI64Type(), expertInput, ids,
          weights, layer.getExpertRank(), layer.getPhysToLog(), layer.getReplicaShare(),
          b.getI64IntegerAttr(maxTokens * ep), b.getI64IntegerAttr(ep),
          b.getI64IntegerAttr(maxTokens),
          decode ? b.getI64IntegerAttr(fixed.slotsPerPeer) : IntegerAttr(),
          DispatchQuantizationAttr(), layer.getPerBatchReplicasAttr(),
          layer.getPhysToLog() ? b.getI64IntegerAttr(experts) : IntegerAttr());
      expertInput = exchange.getReceived();
      ids = exchange.getLocalIds();
      weights = exchange.getLocalWeights();
      handle = exchange.getHandle();
    }
    auto inputType = cast<RankedTensorType>(expertInput.getType());
    int64_t inputTokens = inputType.getDimSize(0);
    IntegerAttr capacity, tile;
    // The masked layout's blocks are its capacity; padding them to a row
    // tile is left for when a GEMM wants it there (static-received).
    const bool masked = decode && !(staticReceived && ep > 1 && rowTile > 1);
    if (!masked && rowTile > 1)
      tile = b.getI64IntegerAttr(rowTile);
    int64_t rows = ShapedType::isDynamic(inputTokens)
                       ? ShapedType::kDynamic
                       : DispatchOp::paddedRows(inputTokens * topK, localExperts, rowTile);
    if (masked) {
      capacity = b.getI64IntegerAttr(fixed.capacityPerExpert);
      rows = fixed.maskedRows;
    }
    auto dispatch = DispatchOp::create(
        b, xType.clone({rows, xType.getDimSize(1)}),
        RankedTensorType::get({rows}, i32),
        RankedTensorType::get({inputTokens, topK}, i32),
        RankedTensorType::get({localExperts + 1}, i32), expertInput, ids,
        b.getI64IntegerAttr(localExperts), capacity, tile);

    // One rank without padding: every dispatched row is a choice of a local
    // expert. activate-all-rows activates the padding rows (zeros) and, with
    // ep > 1, the rows past the received choices too, so that no row count
    // is read back from the dispatch (on a GPU, a read of device memory by
    // the host); the combine never reads those rows.
    const bool everyRowUsed = (ep == 1 && !tile) || activateAllRows;
    Value expertOut = buildExpertMLP(
        b, dispatch.getDispatched(), dispatch.getRowExpert(), dispatch.getExpertOffsets(),
        {layer.getW13(), layer.getW2(), layer.getW13Bias(), layer.getW2Bias(), layer,
         layer.getW13Scale(), layer.getW2Scale(), layer.getWeightBlockAttr()},
        everyRowUsed);
    Value y = CombineOp::create(b, inputType, expertOut, dispatch.getSlot(),
                                weights);
    if (handle)
      y = EpCombineOp::create(b, xType, y, handle);
    if (layer.getSharedW13()) {
      Value shared = sharedFirstOut ? sharedFirstOut : buildShared(b, layer);
      SmallVector<OpFoldResult> sizes =
          tensor::getMixedSizes(b, b.getLoc(), x);
      Value init = tensor::EmptyOp::create(b, sizes, xType.getElementType());
      y = linalg::AddOp::create(b, ValueRange{y, shared}, ValueRange{init})
              .getResult(0);
    }
    layer.getY().replaceAllUsesWith(y);
    layer.erase();
    return success();
  }
};
} // namespace
