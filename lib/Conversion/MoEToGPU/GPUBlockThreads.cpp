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
    for (scf::ParallelOp &loop : outermost)
      while (scf::ParallelOp hoisted = hoistInnerParallel(loop))
        loop = hoisted;
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
          SmallVector<Value> old = loop.getInductionVars();
          map.map(old[n - 1], ivs[0]);
          for (unsigned i = 0; i + 1 < n; ++i)
            map.map(old[i], ivs[i + 1]);
          for (Operation &op : loop.getBody()->without_terminator())
            body.clone(op, map);
        });
    rotated->setAttrs(loop->getDiscardableAttrDictionary());
    loop.erase();
  }

  /// `parallel (i) { for (j) { parallel (k) { body } } }`, as linalg
  /// lowers an op whose reduction dimension sits between parallel ones (the
  /// combine's (token, choice, column)), becomes
  /// `parallel (i, k) { for (j) { body } }`: the inner parallel dimension
  /// gets threads instead of running in one thread per i. Legal because
  /// each (i, k) is independent: k was parallel inside every j. Returns the
  /// new loop, or null where the nest has another shape.
  static scf::ParallelOp hoistInnerParallel(scf::ParallelOp outer) {
    auto only = [](Block *body) -> Operation * {
      return body->getOperations().size() == 2 ? &body->front() : nullptr;
    };
    auto middle = dyn_cast_or_null<scf::ForOp>(only(outer.getBody()));
    if (!middle || middle.getNumRegionIterArgs() != 0 || outer.getNumReductions() != 0)
      return {};
    auto inner = dyn_cast_or_null<scf::ParallelOp>(only(middle.getBody()));
    if (!inner || inner.getNumReductions() != 0)
      return {};
    auto definedOutside = [&](Value v) {
      return !outer->isAncestor(v.getParentRegion()->getParentOp());
    };
    SmallVector<Value> bounds = {middle.getLowerBound(), middle.getUpperBound(),
                                 middle.getStep()};
    llvm::append_range(bounds, inner.getLowerBound());
    llvm::append_range(bounds, inner.getUpperBound());
    llvm::append_range(bounds, inner.getStep());
    if (!llvm::all_of(bounds, definedOutside))
      return {};
    auto concat = [](ValueRange a, ValueRange b) {
      SmallVector<Value> all(a);
      llvm::append_range(all, b);
      return all;
    };
    OpBuilder b(outer);
    Location loc = outer.getLoc();
    auto hoisted = scf::ParallelOp::create(
        b, loc, concat(outer.getLowerBound(), inner.getLowerBound()),
        concat(outer.getUpperBound(), inner.getUpperBound()),
        concat(outer.getStep(), inner.getStep()),
        [&](OpBuilder &nb, Location, ValueRange ivs) {
          IRMapping map;
          unsigned n = outer.getNumLoops();
          map.map(outer.getInductionVars(), ivs.take_front(n));
          map.map(inner.getInductionVars(), ivs.drop_front(n));
          scf::ForOp::create(nb, loc, middle.getLowerBound(), middle.getUpperBound(),
                             middle.getStep(), ValueRange{},
                             [&](OpBuilder &fb, Location, Value j, ValueRange) {
                               map.map(middle.getInductionVar(), j);
                               for (Operation &op : inner.getBody()->without_terminator())
                                 fb.clone(op, map);
                               scf::YieldOp::create(fb, loc);
                             });
        });
    hoisted->setAttrs(outer->getDiscardableAttrDictionary());
    outer.erase();
    return hoisted;
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
