//===- PlanBuffers.cpp - static workspace sizes of every dispatch ---------===//
#include "moe/Dialect/MoE/Analysis/DispatchPlan.h"
#include "moe/Dialect/MoE/Analysis/WorkspacePlan.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/Transforms/Passes.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEPLANBUFFERS
#include "moe/Dialect/MoE/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
WireFormat wireFormatOf(EpDispatchOp op) {
  std::optional<DispatchQuantization> quant = op.getQuantization();
  if (!quant)
    return WireFormat::Native;
  return *quant == DispatchQuantization::fp8_e4m3_g128 ? WireFormat::Fp8G128
                                                        : WireFormat::Fp8G32Ue8m0;
}

struct MoEPlanBuffersPass : moe::impl::MoEPlanBuffersBase<MoEPlanBuffersPass> {
  void runOnOperation() override {
    WalkResult result = getOperation()->walk([&](EpDispatchOp op) {
      if (failed(plan(op)))
        return WalkResult::interrupt();
      ++numPlanned;
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }

  LogicalResult plan(EpDispatchOp op) {
    auto x = op.getX().getType();
    if (!op.getEp() || !op.getMaxTokens() || ShapedType::isDynamic(x.getDimSize(1)) ||
        ShapedType::isDynamic(op.getExpertIds().getType().getDimSize(1)))
      return op.emitError("moe-plan-buffers: cannot size this dispatch's "
                          "workspaces statically: it needs ep, max_tokens, a "
                          "static hidden size and a static top-k");
    DispatchBounds bounds;
    bounds.ep = int64_t(*op.getEp());
    bounds.maxTokens = int64_t(*op.getMaxTokens());
    bounds.topK = op.getExpertIds().getType().getDimSize(1);
    bounds.hidden = x.getDimSize(1);
    bounds.elementBytes = x.getElementTypeBitWidth() / 8;
    bounds.wireActivationBytes =
        wireActivationBytes(wireFormatOf(op), bounds.hidden, bounds.elementBytes);
    bounds.capacity = int64_t(op.getCapacity());
    bounds.slots = int64_t(op.getSlots().value_or(0));
    if (Value scales = op.getReceivedScales())
      bounds.codeGroups = cast<RankedTensorType>(scales.getType()).getDimSize(1);
    if (std::optional<std::string> why = checkDispatchBounds(bounds))
      return op.emitError("moe-plan-buffers: cannot size this dispatch's "
                          "workspaces: ")
             << *why;
    Builder b(op.getContext());
    SmallVector<NamedAttribute> sizes;
    for (const Workspace &w : planWorkspaces(bounds))
      sizes.push_back(b.getNamedAttr(w.name, b.getI64IntegerAttr(w.bytes)));
    op->setAttr("moe.workspaces", b.getDictionaryAttr(sizes));
    return success();
  }
};
} // namespace
