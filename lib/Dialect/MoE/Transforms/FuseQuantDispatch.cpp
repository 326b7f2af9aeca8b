//===- FuseQuantDispatch.cpp - FP8 quantization in the dispatch pack step -===//
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
    std::optional<DispatchQuantization> quant;
    if (scheme == "fp8-e4m3-g128")
      quant = DispatchQuantization::fp8_e4m3_g128;
    else if (scheme == "fp8-e4m3-g32-ue8m0")
      quant = DispatchQuantization::fp8_e4m3_g32_ue8m0;
    else {
      getOperation()->emitError() << "moe-fuse-quant-dispatch: unknown scheme '"
                                  << scheme
                                  << "' (expected fp8-e4m3-g128 or fp8-e4m3-g32-ue8m0)";
      return signalPassFailure();
    }
    int64_t group = *quant == DispatchQuantization::fp8_e4m3_g128 ? 128 : 32;
    getOperation()->walk([&](EpDispatchOp op) {
      int64_t hidden = op.getX().getType().getDimSize(1);
      if (ShapedType::isDynamic(hidden) || hidden % group != 0) {
        op.emitRemark() << "not quantized: hidden size " << hidden
                        << " is not a multiple of " << group;
        return;
      }
      op.setQuantizationAttr(DispatchQuantizationAttr::get(&getContext(), *quant));
      ++numFused;
    });
  }
};
} // namespace
