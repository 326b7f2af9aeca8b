//===- GPUHostCheck.cpp - no device buffer touched by host code -----------===//
#include "moe/Conversion/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEGPUHOSTCHECK
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;

namespace {
struct MoEGPUHostCheckPass : moe::impl::MoEGPUHostCheckBase<MoEGPUHostCheckPass> {
  void runOnOperation() override {
    getOperation()->walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (isa<gpu::GPUModuleOp, gpu::LaunchOp>(op))
        return WalkResult::skip();
      if (isa<memref::LoadOp, memref::StoreOp, memref::CopyOp, vector::TransferReadOp,
              vector::TransferWriteOp, vector::LoadOp, vector::StoreOp>(op)) {
        op->emitError("moe-gpu-host-check: host code would access a device "
                      "buffer here; it must be inside a kernel");
        signalPassFailure();
      }
      return WalkResult::advance();
    });
  }
};
} // namespace
