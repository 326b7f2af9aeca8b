//===- FuseQuantDispatch.cpp - FP8 quantization in the dispatch pack step -===//
#include "moe/Dialect/MoE/Analysis/DispatchPlan.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/Transforms/Passes.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEFUSEQUANTDISPATCH
#include "moe/Dialect/MoE/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
/// Rebuilds `op` so that it returns FP8 codes and scales, permutes both with
/// the local dispatch and hands them to the gate/up GEMM. Leaves the IR
/// alone unless the received rows feed exactly that chain.
void feedCodesToTheGemm(EpDispatchOp op, int64_t groups) {
  if (!op.getReceived().hasOneUse())
    return;
  auto local = dyn_cast<DispatchOp>(*op.getReceived().getUsers().begin());
  if (!local || local.getX() != op.getReceived() || !local.getDispatched().hasOneUse())
    return;
  auto gemm = dyn_cast<GroupedMatmulOp>(*local.getDispatched().getUsers().begin());
  if (!gemm || gemm.getInput() != local.getDispatched() || gemm.getScales())
    return;

  ImplicitLocOpBuilder b(op.getLoc(), op);
  auto i8 = b.getI8Type();
  auto received = op.getReceived().getType();
  auto scalesType = RankedTensorType::get({received.getDimSize(0), groups}, b.getF32Type());
  auto fp8 = EpDispatchOp::create(
      b, received.clone(i8), scalesType, op.getLocalIds().getType(), op.getLocalWeights().getType(),
      b.getI64Type(), op.getX(), op.getExpertIds(), op.getExpertWeights(), op.getExpertRank(),
      op.getPhysToLog(), op.getReplicaShare(), op.getCapacityAttr(), op.getEpAttr(),
      op.getMaxTokensAttr(), op.getSlotsAttr(), op.getQuantizationAttr(),
      op.getPerBatchReplicasAttr(), op.getExpertsAttr());
  b.setInsertionPoint(local);
  auto rowsOf = [&](Value rows, Type element, int64_t width) {
    auto type = local.getDispatched().getType();
    Value offsets = local.getExpertOffsets();
    return DispatchOp::create(b, type.clone({type.getDimSize(0), width}, element),
                              local.getRowExpert().getType(), local.getSlot().getType(),
                              offsets ? offsets.getType() : Type(), rows,
                              local.getExpertIds(), local.getNumExpertsAttr(),
                              local.getCapacityAttr(), local.getRowTileAttr());
  };
  DispatchOp codes = rowsOf(fp8.getReceived(), i8, received.getDimSize(1));
  DispatchOp scales = rowsOf(fp8.getReceivedScales(), b.getF32Type(), groups);
  b.setInsertionPoint(gemm);
  auto fed = GroupedMatmulOp::create(b, gemm.getType(), codes.getDispatched(),
                                     gemm.getWeight(), codes.getRowExpert(),
                                     scales.getDispatched(), gemm.getWeightScales(),
                                     codes.getExpertOffsets(), gemm.getWeightBlockAttr());
  gemm.getResult().replaceAllUsesWith(fed.getResult());
  local.getRowExpert().replaceAllUsesWith(codes.getRowExpert());
  local.getSlot().replaceAllUsesWith(codes.getSlot());
  if (Value offsets = local.getExpertOffsets())
    offsets.replaceAllUsesWith(codes.getExpertOffsets());
  op.getLocalIds().replaceAllUsesWith(fp8.getLocalIds());
  op.getLocalWeights().replaceAllUsesWith(fp8.getLocalWeights());
  op.getHandle().replaceAllUsesWith(fp8.getHandle());
  gemm.erase();
  local.erase();
  op.erase();
}

struct MoEFuseQuantDispatchPass
    : moe::impl::MoEFuseQuantDispatchBase<MoEFuseQuantDispatchPass> {
  using MoEFuseQuantDispatchBase::MoEFuseQuantDispatchBase;

  void runOnOperation() override {
    std::optional<WireFormat> format = parseWireFormat(scheme);
    if (!format || *format == WireFormat::Native) {
      getOperation()->emitError() << "moe-fuse-quant-dispatch: unknown scheme '"
                                  << scheme
                                  << "' (expected fp8-e4m3-g128 or fp8-e4m3-g32-ue8m0)";
      return signalPassFailure();
    }
    DispatchQuantization quant = *format == WireFormat::Fp8G128
                                     ? DispatchQuantization::fp8_e4m3_g128
                                     : DispatchQuantization::fp8_e4m3_g32_ue8m0;
    // Collected first: feeding the GEMM replaces ops after the dispatch.
    SmallVector<EpDispatchOp> dispatches;
    getOperation()->walk([&](EpDispatchOp op) { dispatches.push_back(op); });
    for (EpDispatchOp op : dispatches) {
      int64_t hidden = op.getX().getType().getDimSize(1);
      QuantDecision decision = decideQuantization(
          *format, ShapedType::isDynamic(hidden) ? std::nullopt
                                                 : std::optional<int64_t>(hidden));
      if (!decision.quantize) {
        op.emitRemark() << "not quantized: " << decision.why;
        continue;
      }
      op.setQuantizationAttr(DispatchQuantizationAttr::get(&getContext(), quant));
      ++numFused;
      if (gemmConsumesFp8)
        feedCodesToTheGemm(op, hidden / scaleGroup(*format));
    }
  }
};
} // namespace
