//===- GPUBlockThreads.cpp - outermost scf.parallel -> blocks x threads ---===//
#include "moe/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"

#include "llvm/Support/MathExtras.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEGPUBLOCKTHREADS
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;

namespace {
struct MoEGPUBlockThreadsPass
    : moe::impl::MoEGPUBlockThreadsBase<MoEGPUBlockThreadsPass> {
  using Base::Base;

  void runOnOperation() override {
    if (threads < 1 || threads > 1024) {
      getOperation()->emitError("moe-gpu-block-threads: threads must be in [1, 1024], got ")
          << int64_t(threads);
      return signalPassFailure();
    }
    SmallVector<scf::ParallelOp> outermost;
    getOperation()->walk([&](scf::ParallelOp loop) {
      if (!loop->getParentOfType<scf::ParallelOp>())
        outermost.push_back(loop);
    });
    for (scf::ParallelOp loop : outermost) {
      SmallVector<int64_t> tiles(loop.getNumLoops(), 1);
      tiles.back() = threadsFor(loop);
      if (tiles.back() > 1)
        scf::tileParallelLoop(loop, tiles, /*noMinMaxBounds=*/true);
    }
  }

  /// `threads`, or the next power of two above a smaller static trip count.
  int64_t threadsFor(scf::ParallelOp loop) const {
    std::optional<int64_t> lower = getConstantIntValue(loop.getLowerBound().back());
    std::optional<int64_t> upper = getConstantIntValue(loop.getUpperBound().back());
    std::optional<int64_t> step = getConstantIntValue(loop.getStep().back());
    if (!lower || !upper || !step || *step < 1)
      return threads;
    int64_t trips = llvm::divideCeil(std::max<int64_t>(*upper - *lower, 0), *step);
    return std::min<int64_t>(threads, llvm::PowerOf2Ceil(std::max<int64_t>(trips, 1)));
  }
};
} // namespace
