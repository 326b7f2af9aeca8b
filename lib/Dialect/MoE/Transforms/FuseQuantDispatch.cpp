//===- FuseQuantDispatch.cpp - FP8 quantization in the dispatch pack step -===//
#include "moe/Dialect/MoE/Analysis/DispatchPlan.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/Transforms/Passes.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEFUSEQUANTDISPATCH
#include "moe/Dialect/MoE/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
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
    getOperation()->walk([&](EpDispatchOp op) {
      int64_t hidden = op.getX().getType().getDimSize(1);
      QuantDecision decision = decideQuantization(
          *format, ShapedType::isDynamic(hidden) ? std::nullopt
                                                 : std::optional<int64_t>(hidden));
      if (!decision.quantize) {
        op.emitRemark() << "not quantized: " << decision.why;
        return;
      }
      op.setQuantizationAttr(DispatchQuantizationAttr::get(&getContext(), quant));
      ++numFused;
    });
  }
};
} // namespace
