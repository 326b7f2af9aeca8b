//===- PlanChunks.cpp - wrap MoE layers in budgeted chunk loops -----------===//
#include "moe/Dialect/MoE/Analysis/ChunkPlan.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/Transforms/Passes.h"
#include "moe/Support/Limits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEPLANCHUNKS
#include "moe/Dialect/MoE/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
LayerShape shapeOf(LayerOp layer) {
  LayerShape shape;
  shape.hidden = layer.getX().getType().getDimSize(1);
  shape.intermediate = layer.getW2().getType().getDimSize(2);
  shape.experts = layer.getRouterWeight().getType().getDimSize(0);
  shape.topK = layer.getRouting().getTopK();
  shape.ep = layer.getLayout().getEp();
  shape.elementBytes = layer.getX().getType().getElementTypeBitWidth() / 8;
  if (Value shared = layer.getSharedW2())
    shape.sharedIntermediate = cast<RankedTensorType>(shared.getType()).getDimSize(1);
  return shape;
}

struct MoEPlanChunksPass : moe::impl::MoEPlanChunksBase<MoEPlanChunksPass> {
  using MoEPlanChunksBase::MoEPlanChunksBase;

  void runOnOperation() override {
    if (budgetBytes <= 0) {
      getOperation()->emitError("moe-plan-chunks needs budget-bytes > 0");
      return signalPassFailure();
    }
    if (maxTokensPerRank < 0 || maxTokensPerRank > limits::kMaxTokens) {
      getOperation()->emitError("moe-plan-chunks needs max-tokens-per-rank in [0, ")
          << limits::kMaxTokens << "], got " << int64_t(maxTokensPerRank);
      return signalPassFailure();
    }
    SmallVector<LayerOp> layers;
    getOperation()->walk([&](LayerOp layer) {
      if (!layer->getParentOfType<ChunkLoopOp>())
        layers.push_back(layer);
    });
    for (LayerOp layer : layers)
      if (failed(plan(layer)))
        return signalPassFailure();
  }

  LogicalResult plan(LayerOp layer) {
    int64_t maxTokens = layer.getMaxTokensPerRank().value_or(maxTokensPerRank);
    int64_t staticTokens = layer.getX().getType().getDimSize(0);
    if (!ShapedType::isDynamic(staticTokens))
      maxTokens = std::min(maxTokens, staticTokens);
    if (ShapedType::isDynamic(layer.getX().getType().getDimSize(1)) ||
        ShapedType::isDynamic(layer.getW2().getType().getDimSize(2)))
      return layer.emitError("moe-plan-chunks needs static hidden and "
                             "intermediate sizes");
    std::string error;
    std::optional<ChunkPlan> plan =
        planChunks(shapeOf(layer), budgetBytes, maxTokens, error);
    if (!plan)
      return layer.emitError("moe-plan-chunks: ") << error;

    OpBuilder b(layer);
    auto record = b.getDictionaryAttr(
        {b.getNamedAttr("bytes_per_token", b.getI64IntegerAttr(plan->bytesPerToken)),
         b.getNamedAttr("budget_bytes", b.getI64IntegerAttr(budgetBytes)),
         b.getNamedAttr("chunk_size", b.getI64IntegerAttr(plan->chunkSize)),
         b.getNamedAttr("max_chunks", b.getI64IntegerAttr(plan->maxChunks))});
    if (!plan->chunked) {
      layer->setAttr("moe.chunk_plan", record);
      return success();
    }

    bool acrossRanks = layer.getLayout().getEp() > 1;
    auto xType = layer.getX().getType();
    auto loop = ChunkLoopOp::create(b, layer.getLoc(), xType, layer.getX(),
                                    b.getI64IntegerAttr(plan->chunkSize),
                                    acrossRanks ? b.getUnitAttr() : UnitAttr());
    loop->setAttr("moe.chunk_plan", record);
    auto chunkType = RankedTensorType::get(
        {ShapedType::kDynamic, xType.getDimSize(1)}, xType.getElementType());
    Block *body = b.createBlock(&loop.getBody(), {}, {chunkType}, {layer.getLoc()});
    b.setInsertionPointToStart(body);
    IRMapping map;
    map.map(layer.getX(), body->getArgument(0));
    Operation *inner = b.clone(*layer, map);
    inner->getResult(0).setType(chunkType);
    if (acrossRanks)
      cast<LayerOp>(inner).setMaxTokensPerRankAttr(
          b.getI64IntegerAttr(plan->chunkSize));
    YieldOp::create(b, layer.getLoc(), inner->getResult(0));
    layer.getY().replaceAllUsesWith(loop.getY());
    layer.erase();
    ++numChunked;
    return success();
  }
};
} // namespace
