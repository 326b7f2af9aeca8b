//===- ApproximateActivationExp.cpp - vectorizable exp in activations -----===//
#include "moe/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEAPPROXIMATEACTIVATIONEXP
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;

namespace {
struct ApproximateActivationExpPass
    : moe::impl::MoEApproximateActivationExpBase<ApproximateActivationExpPass> {
  void runOnOperation() override {
    SmallVector<Operation *> marked;
    getOperation()->walk([&](math::ExpOp exp) {
      if (exp->hasAttr(moe::kApproximableExp))
        marked.push_back(exp);
    });
    RewritePatternSet patterns(&getContext());
    populateMathPolynomialApproximationPatterns(
        patterns, [](StringRef name) { return name == math::ExpOp::getOperationName(); });
    // Only the marked ops: routing's exp stays exact.
    if (failed(applyOpPatternsGreedily(marked, std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
