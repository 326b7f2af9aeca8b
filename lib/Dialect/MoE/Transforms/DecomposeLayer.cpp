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

/// gate/up GEMM, activation, down GEMM over rows whose expert is `rowExpert`.
Value buildExpertMLP(ImplicitLocOpBuilder &b, Value rows, Value rowExpert,
                     Value offsets, Value w13, Value w2, ActivationAttr activation) {
  int64_t n = cast<RankedTensorType>(rows.getType()).getDimSize(0);
  auto w13Shape = cast<RankedTensorType>(w13.getType()).getShape();
  auto w2Shape = cast<RankedTensorType>(w2.getType()).getShape();
  Value gateUp = GroupedMatmulOp::create(b, withShape(rows, {n, w13Shape[1]}),
                                         rows, w13, rowExpert, /*scales=*/Value(), offsets);
  Value act = ActivationOp::create(b, withShape(rows, {n, w13Shape[1] / 2}),
                                   gateUp, activation);
  return GroupedMatmulOp::create(b, withShape(rows, {n, w2Shape[1]}), act, w2,
                                 rowExpert, /*scales=*/Value(), offsets);
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
  return buildExpertMLP(b, x, allZero, offsets, addExpertDim(layer.getSharedW13()),
                        addExpertDim(layer.getSharedW2()),
                        layer.getActivationAttr());
}

/// Qwen2-MoE's gate on the shared expert: `shared[t] * sigmoid(gate . x[t])`,
/// the dot product and the sigmoid in f32.
Value gateSharedExpert(ImplicitLocOpBuilder &b, Value x, Value gate, Value shared) {
  auto xType = cast<RankedTensorType>(x.getType());
  Type f32 = b.getF32Type();
  MLIRContext *ctx = b.getContext();
  AffineExpr t, h;
  bindDims(ctx, t, h);
  SmallVector<OpFoldResult> tokens = {tensor::getMixedSize(b, b.getLoc(), x, 0)};
  Value zero = arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f));
  Value logits = linalg::FillOp::create(b, zero, tensor::EmptyOp::create(b, tokens, f32).getResult())
                     .getResult(0);
  auto extend = [&](OpBuilder &nb, Location loc, Value v) -> Value {
    return v.getType() == f32 ? v : arith::ExtFOp::create(nb, loc, f32, v).getResult();
  };
  logits = linalg::GenericOp::create(
               b, logits.getType(), ValueRange{x, gate}, ValueRange{logits},
               ArrayRef<AffineMap>{AffineMap::get(2, 0, {t, h}, ctx),
                                   AffineMap::get(2, 0, {b.getAffineConstantExpr(0), h}, ctx),
                                   AffineMap::get(2, 0, {t}, ctx)},
               ArrayRef<utils::IteratorType>{utils::IteratorType::parallel,
                                             utils::IteratorType::reduction},
               [&](OpBuilder &nb, Location loc, ValueRange args) {
                 Value product = arith::MulFOp::create(nb, loc, extend(nb, loc, args[0]),
                                                       extend(nb, loc, args[1]));
                 linalg::YieldOp::create(
                     nb, loc, ValueRange{arith::AddFOp::create(nb, loc, args[2], product)});
               })
               .getResult(0);
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, b.getLoc(), x);
  Value init = tensor::EmptyOp::create(b, sizes, xType.getElementType());
  return linalg::GenericOp::create(
             b, init.getType(), ValueRange{shared, logits}, ValueRange{init},
             ArrayRef<AffineMap>{AffineMap::get(2, 0, {t, h}, ctx),
                                 AffineMap::get(2, 0, {t}, ctx),
                                 AffineMap::get(2, 0, {t, h}, ctx)},
             ArrayRef<utils::IteratorType>{utils::IteratorType::parallel,
                                           utils::IteratorType::parallel},
             [&](OpBuilder &nb, Location loc, ValueRange args) {
               Value one = arith::ConstantOp::create(nb, loc, nb.getF32FloatAttr(1.0f));
               Value negated = arith::NegFOp::create(nb, loc, args[1]);
               Value sigmoid = arith::DivFOp::create(
                   nb, loc, one,
                   arith::AddFOp::create(nb, loc, one, math::ExpOp::create(nb, loc, negated)));
               Value scaled = arith::MulFOp::create(nb, loc, extend(nb, loc, args[0]), sigmoid);
               if (args[2].getType() != f32)
                 scaled = arith::TruncFOp::create(nb, loc, args[2].getType(), scaled);
               linalg::YieldOp::create(nb, loc, ValueRange{scaled});
             })
      .getResult(0);
}

/// x[t] * weights[t, 0] (top_k = 1), in f32, rounded to x's element type.
Value scaleTokens(ImplicitLocOpBuilder &b, Value x, Value weights) {
  auto xType = cast<RankedTensorType>(x.getType());
  MLIRContext *ctx = b.getContext();
  AffineExpr t, h;
  bindDims(ctx, t, h);
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, b.getLoc(), x);
  Value init = tensor::EmptyOp::create(b, sizes, xType.getElementType());
  Type f32 = b.getF32Type();
  return linalg::GenericOp::create(
             b, init.getType(), ValueRange{x, weights}, ValueRange{init},
             ArrayRef<AffineMap>{AffineMap::get(2, 0, {t, h}, ctx),
                                 AffineMap::get(2, 0, {t, b.getAffineConstantExpr(0)}, ctx),
                                 AffineMap::get(2, 0, {t, h}, ctx)},
             ArrayRef<utils::IteratorType>{utils::IteratorType::parallel,
                                           utils::IteratorType::parallel},
             [&](OpBuilder &nb, Location loc, ValueRange args) {
               Value v = args[0].getType() == f32
                             ? args[0]
                             : arith::ExtFOp::create(nb, loc, f32, args[0]).getResult();
               Value scaled = arith::MulFOp::create(nb, loc, v, args[1]);
               if (args[2].getType() != f32)
                 scaled = arith::TruncFOp::create(nb, loc, args[2].getType(), scaled);
               linalg::YieldOp::create(nb, loc, ValueRange{scaled});
             })
      .getResult(0);
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

  LogicalResult decompose(LayerOp layer) {
    ImplicitLocOpBuilder b(layer.getLoc(), layer);
    Value x = layer.getX();
    auto xType = layer.getX().getType();
    int64_t tokens = xType.getDimSize(0);
    int64_t topK = layer.getRouting().getTopK();
    int64_t experts = layer.getRouterWeight().getType().getDimSize(0);

    auto i32 = b.getI32Type();
    auto route = RouteOp::create(
        b, RankedTensorType::get({tokens, topK}, i32),
        RankedTensorType::get({tokens, topK}, b.getF32Type()), x,
        layer.getRouterWeight(), layer.getCorrectionBias(),
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
      int64_t received = decode ? fixed.receivedRows : ShapedType::kDynamic;
      auto exchange = EpDispatchOp::create(
          b, xType.clone({received, xType.getDimSize(1)}), /*received_scales=*/Type(),
          RankedTensorType::get({received, topK}, i32),
          RankedTensorType::get({received, topK}, b.getF32Type()),
          b.getI64Type(), expertInput, ids, weights, layer.getExpertRank(),
          layer.getPhysToLog(), layer.getReplicaShare(),
          b.getI64IntegerAttr(maxTokens * ep), b.getI64IntegerAttr(ep),
          b.getI64IntegerAttr(maxTokens),
          decode ? b.getI64IntegerAttr(fixed.slotsPerPeer) : IntegerAttr(),
          DispatchQuantizationAttr());
      expertInput = exchange.getReceived();
      ids = exchange.getLocalIds();
      weights = exchange.getLocalWeights();
      handle = exchange.getHandle();
    }
    auto inputType = cast<RankedTensorType>(expertInput.getType());
    int64_t inputTokens = inputType.getDimSize(0);
    IntegerAttr capacity, tile;
    // The masked layout's blocks are its capacity; padding them to a row
    // tile is left for when a GEMM wants it there.
    if (!decode && rowTile > 1)
      tile = b.getI64IntegerAttr(rowTile);
    int64_t rows = ShapedType::isDynamic(inputTokens)
                       ? ShapedType::kDynamic
                       : inputTokens * topK + localExperts * (rowTile - 1);
    if (decode) {
      capacity = b.getI64IntegerAttr(fixed.capacityPerExpert);
      rows = fixed.maskedRows;
    }
    auto dispatch = DispatchOp::create(
        b, xType.clone({rows, xType.getDimSize(1)}),
        RankedTensorType::get({rows}, i32),
        RankedTensorType::get({inputTokens, topK}, i32),
        RankedTensorType::get({localExperts + 1}, i32), expertInput, ids,
        b.getI64IntegerAttr(localExperts), capacity, tile);

    Value expertOut = buildExpertMLP(b, dispatch.getDispatched(),
                                     dispatch.getRowExpert(),
                                     dispatch.getExpertOffsets(), layer.getW13(),
                                     layer.getW2(), layer.getActivationAttr());
    Value y = CombineOp::create(b, inputType, expertOut, dispatch.getSlot(),
                                weights);
    if (handle)
      y = EpCombineOp::create(b, xType, y, handle);
    if (layer.getSharedW13()) {
      Value shared = buildSharedExpert(b, layer);
      if (Value gate = layer.getSharedGate())
        shared = gateSharedExpert(b, layer.getX(), gate, shared);
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
