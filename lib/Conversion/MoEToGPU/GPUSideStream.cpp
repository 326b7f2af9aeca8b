//===- GPUSideStream.cpp - the shared expert's kernels on a second stream -===//
//
// The shared expert depends on x alone, so on a GPU it can run beside the
// routing, the dispatch and the routed experts, filling the SMs their small
// kernels leave idle. Its kernels (named kSideStreamKernel) go on a second
// stream; the host code orders the two with events (fork, join) wherever a
// buffer passes between them, and joins before every block's end.
//
//===----------------------------------------------------------------------===//
#include "moe/Conversion/Passes.h"
#include "moe/Dialect/MoE/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEGPUSIDESTREAM
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;

namespace {
/// The two orders between a stream and its side stream
/// (CudaRuntimeWrappers.cpp).
constexpr const char kForkSide[] = "moertGpuForkSide";
constexpr const char kJoinSide[] = "moertGpuJoinSide";

/// A launch of a side-stream kernel: by the outlined kernel's name, or
/// before outlining (moe-compile --emit=launches) by the name it will take.
bool isSideLaunch(Operation *op) {
  if (auto launch = dyn_cast<gpu::LaunchFuncOp>(op))
    return launch.getKernelName().getValue() == moe::kSideStreamKernel;
  auto launch = dyn_cast<gpu::LaunchOp>(op);
  return launch && launch.getFunctionAttr() &&
         launch.getFunctionAttr().getValue() == moe::kSideStreamKernel;
}

/// The buffer `value` is a view of: through casts, subviews and reshapes to
/// a workspace view (each its own buffer) or an argument.
Value rootOf(Value value) {
  while (Operation *def = value.getDefiningOp()) {
    auto view = dyn_cast<ViewLikeOpInterface>(def);
    if (!view || isa<memref::ViewOp>(def))
      break;
    value = view.getViewSource();
  }
  return value;
}

using Roots = llvm::SmallDenseSet<Value, 8>;

bool overlap(const Roots &a, const Roots &b) {
  return llvm::any_of(a, [&](Value v) { return b.contains(v); });
}

/// The kernels and runtime calls inside an op, by stream, with the roots of
/// the buffers each stream's use.
struct Uses {
  bool side = false, main = false;
  Roots sideRoots, mainRoots;
};

struct SideStreams {
  func::FuncOp func;
  Value stream;

  /// Roots of buffers that need an order: not the entry's inputs.
  void addRoots(ValueRange operands, Roots &roots) {
    for (Value operand : operands) {
      if (!isa<MemRefType>(operand.getType()))
        continue;
      Value root = rootOf(operand);
      auto arg = dyn_cast<BlockArgument>(root);
      if (arg && arg.getOwner() == &func.getBody().front() &&
          !func.getArgAttr(arg.getArgNumber(), moe::kGpuWrittenArg))
        continue;
      roots.insert(root);
    }
  }

  Uses usesOf(Operation &op) {
    Uses uses;
    op.walk([&](Operation *inner) {
      if (auto launch = dyn_cast<gpu::LaunchFuncOp>(inner)) {
        const bool side = isSideLaunch(launch);
        (side ? uses.side : uses.main) = true;
        addRoots(launch.getKernelOperands(), side ? uses.sideRoots : uses.mainRoots);
      } else if (auto launch = dyn_cast<gpu::LaunchOp>(inner)) {
        const bool side = isSideLaunch(launch);
        (side ? uses.side : uses.main) = true;
        llvm::SetVector<Value> operands;
        getUsedValuesDefinedAbove(launch.getBody(), operands);
        addRoots(operands.getArrayRef(), side ? uses.sideRoots : uses.mainRoots);
      } else if (auto call = dyn_cast<func::CallOp>(inner)) {
        uses.main = true;
        addRoots(call.getOperands(), uses.mainRoots);
      }
    });
    return uses;
  }

  void call(Operation *before, StringRef callee) {
    OpBuilder b(before);
    func::CallOp::create(b, before->getLoc(), callee, TypeRange{}, ValueRange{stream});
  }

  /// Orders the block's kernels on the two streams (see the pass's
  /// description); ops holding both are ordered inside, block by block.
  void order(Block &block) {
    bool forked = false;
    Roots sideUsed, mainUsed; // since the last fork
    auto join = [&](Operation *before) {
      call(before, kJoinSide);
      forked = false;
      sideUsed.clear();
      mainUsed.clear();
    };
    for (Operation &op : llvm::make_early_inc_range(block)) {
      if (op.hasTrait<OpTrait::IsTerminator>()) {
        if (forked)
          join(&op);
        return;
      }
      Uses uses = usesOf(op);
      if (uses.side && uses.main) {
        if (forked)
          join(&op);
        for (Region &region : op.getRegions())
          for (Block &inner : region)
            order(inner);
      } else if (uses.side) {
        if (!forked || overlap(uses.sideRoots, mainUsed)) {
          call(&op, kForkSide);
          forked = true;
          mainUsed.clear();
        }
        sideUsed.insert(uses.sideRoots.begin(), uses.sideRoots.end());
      } else if (uses.main && forked) {
        if (overlap(uses.mainRoots, sideUsed))
          join(&op);
        else
          mainUsed.insert(uses.mainRoots.begin(), uses.mainRoots.end());
      }
    }
  }
};

/// `name` declared in `module` as a private function of `type`.
void declare(ModuleOp module, StringRef name, FunctionType type) {
  if (module.lookupSymbol(name))
    return;
  OpBuilder b(module.getBodyRegion());
  b.setInsertionPointToStart(module.getBody());
  func::FuncOp::create(b, module.getLoc(), name, type).setPrivate();
}

struct MoEGPUSideStreamPass : moe::impl::MoEGPUSideStreamBase<MoEGPUSideStreamPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      bool hasSide = false;
      func.walk([&](Operation *op) { hasSide |= isSideLaunch(op); });
      if (!hasSide)
        continue;
      Value stream;
      for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
        if (func.getArgAttr(i, moe::kGpuStreamArg))
          stream = func.getArgument(i);
      if (!stream) {
        func.emitError("moe-gpu-side-stream: side-stream kernels in a function without a "
                       "stream argument (moe-gpu-host-abi adds it)");
        return signalPassFailure();
      }
      Type pointer = stream.getType();
      MLIRContext *ctx = &getContext();
      declare(module, moe::kGpuSideStreamFunction, FunctionType::get(ctx, {pointer}, {pointer}));
      declare(module, kForkSide, FunctionType::get(ctx, {pointer}, {}));
      declare(module, kJoinSide, FunctionType::get(ctx, {pointer}, {}));
      // The side stream, got once: moe-gpu-launch-on-stream gives it to
      // the side kernels.
      OpBuilder b(ctx);
      b.setInsertionPointToStart(&func.getBody().front());
      func::CallOp::create(b, func.getLoc(), moe::kGpuSideStreamFunction, TypeRange{pointer},
                           ValueRange{stream});
      SideStreams streams{func, stream};
      for (Block &block : func.getBody())
        streams.order(block);
    }
  }
};
} // namespace
