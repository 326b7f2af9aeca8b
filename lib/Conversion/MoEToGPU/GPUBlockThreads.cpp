//===- GPUBlockThreads.cpp - outermost scf.parallel -> blocks x threads ---===//
#include "moe/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/IR/IRMapping.h"

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
      if (tiles.back() == 1)
        continue;
      auto [outer, inner] = scf::tileParallelLoop(loop, tiles, /*noMinMaxBounds=*/true);
      innermostFirst(inner);
    }
  }

  /// gpu-map-parallel-loops gives a loop's dimensions threads x, y, z in
  /// order; the tiled (innermost) dimension goes first, to thread x: it may
  /// have up to 1024 threads there (64 in z), and consecutive lanes of a
  /// warp take consecutive elements.
  static void innermostFirst(scf::ParallelOp loop) {
    unsigned n = loop.getNumLoops();
    if (n < 2)
      return;
    auto rotate = [n](ValueRange values) {
      SmallVector<Value> rotated = {values[n - 1]};
      llvm::append_range(rotated, values.take_front(n - 1));
      return rotated;
    };
    OpBuilder b(loop);
    auto rotated = scf::ParallelOp::create(
        b, loop.getLoc(), rotate(loop.getLowerBound()), rotate(loop.getUpperBound()),
        rotate(loop.getStep()), [&](OpBuilder &body, Location, ValueRange ivs) {
          IRMapping map;
          ValueRange old = loop.getInductionVars();
          map.map(old[n - 1], ivs[0]);
          for (unsigned i = 0; i + 1 < n; ++i)
            map.map(old[i], ivs[i + 1]);
          for (Operation &op : loop.getBody()->without_terminator())
            body.clone(op, map);
        });
    rotated->setAttrs(loop->getDiscardableAttrDictionary());
    loop.erase();
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
