//===- GPULaunchOnStream.cpp - launches on the entry's stream argument ----===//
#include "moe/Conversion/Passes.h"
#include "moe/Dialect/MoE/Transforms/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEGPULAUNCHONSTREAM
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;

namespace {
struct MoEGPULaunchOnStreamPass
    : moe::impl::MoEGPULaunchOnStreamBase<MoEGPULaunchOnStreamPass> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<LLVM::LLVMFuncOp>()) {
      Value stream;
      for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
        if (func.getArgAttr(i, moe::kGpuStreamArg))
          stream = func.getArgument(i);
      // moe-gpu-side-stream's side stream, where it got one.
      Value side;
      func.walk([&](LLVM::CallOp call) {
        if (call.getCallee() == StringRef(moe::kGpuSideStreamFunction))
          side = call.getResult();
      });
      WalkResult result = func.walk([&](gpu::LaunchFuncOp launch) {
        if (!stream) {
          launch.emitError("moe-gpu-launch-on-stream: a launch in a function "
                           "without a stream argument (moe-gpu-host-abi adds it)");
          return WalkResult::interrupt();
        }
        if (!launch.getAsyncDependencies().empty() || launch.getAsyncToken()) {
          launch.emitError("moe-gpu-launch-on-stream: an async launch; the "
                           "entry's launches are ordered by its one stream");
          return WalkResult::interrupt();
        }
        if (launch.getKernelName().getValue() != moe::kSideStreamKernel) {
          launch.getAsyncObjectMutable().assign(stream);
          return WalkResult::advance();
        }
        if (!side) {
          launch.emitError("moe-gpu-launch-on-stream: a side-stream kernel in a function "
                           "without a side stream (moe-gpu-side-stream gets it)");
          return WalkResult::interrupt();
        }
        launch.getAsyncObjectMutable().assign(side);
        return WalkResult::advance();
      });
      if (result.wasInterrupted())
        return signalPassFailure();
    }
  }
};
} // namespace
