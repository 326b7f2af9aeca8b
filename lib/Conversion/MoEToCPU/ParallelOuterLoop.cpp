//===- ParallelOuterLoop.cpp - scf.parallel over rows, scf.for inside -----===//
#include "moe/Conversion/Passes.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEPARALLELOUTERLOOP
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;

namespace {
struct OuterDimensionOnly : OpRewritePattern<scf::ParallelOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(scf::ParallelOp op,
                                PatternRewriter &rewriter) const override {
    // Inside another parallel loop (a reduction's inner dimensions) every
    // dimension becomes sequential; an outermost loop keeps its first.
    const bool nested = op->getParentOfType<scf::ParallelOp>() != nullptr;
    if ((!nested && op.getNumLoops() < 2) || op.getNumReductions() != 0)
      return failure();
    if (nested) {
      scf::buildLoopNest(rewriter, op.getLoc(), op.getLowerBound(), op.getUpperBound(),
                         op.getStep(), [&](OpBuilder &inner, Location, ValueRange ivs) {
                           IRMapping map;
                           map.map(op.getInductionVars(), ivs);
                           for (Operation &bodyOp : op.getBody()->without_terminator())
                             inner.clone(bodyOp, map);
                         });
      rewriter.eraseOp(op);
      return success();
    }
    Location loc = op.getLoc();
    auto outer = scf::ParallelOp::create(
        rewriter, loc, ValueRange{op.getLowerBound()[0]}, ValueRange{op.getUpperBound()[0]},
        ValueRange{op.getStep()[0]},
        [&](OpBuilder &b, Location nestedLoc, ValueRange outerIv) {
          scf::buildLoopNest(
              b, nestedLoc, op.getLowerBound().drop_front(), op.getUpperBound().drop_front(),
              op.getStep().drop_front(),
              [&](OpBuilder &inner, Location, ValueRange innerIvs) {
                SmallVector<Value> ivs = op.getInductionVars();
                IRMapping map;
                map.map(ivs[0], outerIv[0]);
                for (auto [from, to] : llvm::zip(ArrayRef<Value>(ivs).drop_front(), innerIvs))
                  map.map(from, to);
                for (Operation &bodyOp : op.getBody()->without_terminator())
                  inner.clone(bodyOp, map);
              });
        });
    outer->setAttrs(op->getDiscardableAttrDictionary());
    rewriter.eraseOp(op);
    return success();
  }
};

struct ParallelOuterLoopPass
    : moe::impl::MoEParallelOuterLoopBase<ParallelOuterLoopPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<OuterDimensionOnly>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
