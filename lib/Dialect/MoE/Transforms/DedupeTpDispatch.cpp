//===- DedupeTpDispatch.cpp - one dispatch per token per TP group ---------===//
#include "moe/Dialect/MoE/Analysis/DispatchPlan.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEDEDUPETPDISPATCH
#include "moe/Dialect/MoE/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
struct MoEDedupeTpDispatchPass
    : moe::impl::MoEDedupeTpDispatchBase<MoEDedupeTpDispatchPass> {
  void runOnOperation() override {
    SmallVector<LayerOp> layers;
    getOperation()->walk([&](LayerOp layer) {
      if (decideTpDedupe(layer.getLayout().getTp(), std::nullopt).slice)
        layers.push_back(layer);
    });
    for (LayerOp layer : layers)
      dedupe(layer);
  }

  void dedupe(LayerOp layer) {
    OpBuilder b(layer);
    Location loc = layer.getLoc();
    int64_t tp = layer.getLayout().getTp();
    auto xType = layer.getX().getType();
    auto sliceType = RankedTensorType::get(
        {ShapedType::kDynamic, xType.getDimSize(1)}, xType.getElementType());
    Value slice = TpSliceOp::create(b, loc, sliceType, layer.getX(),
                                    b.getI64IntegerAttr(tp));
    IRMapping map;
    map.map(layer.getX(), slice);
    auto inner = cast<LayerOp>(b.clone(*layer, map));
    inner.getY().setType(sliceType);
    inner.setLayoutAttr(LayoutAttr::get(b.getContext(), layer.getLayout().getEp(), 1));
    TpDecision decision = decideTpDedupe(tp, layer.getMaxTokensPerRank());
    if (decision.slicedMaxTokens)
      inner.setMaxTokensPerRankAttr(b.getI64IntegerAttr(*decision.slicedMaxTokens));
    auto gather = TpGatherOp::create(b, loc, xType, inner.getY(), layer.getX(),
                                     b.getI64IntegerAttr(tp));
    gather->setAttr("moe.tp_plan",
                    b.getDictionaryAttr({b.getNamedAttr("mode", b.getStringAttr("slice")),
                                         b.getNamedAttr("tp", b.getI64IntegerAttr(tp))}));
    layer.getY().replaceAllUsesWith(gather.getResult());
    layer.erase();
    ++numDeduped;
  }
};
} // namespace
