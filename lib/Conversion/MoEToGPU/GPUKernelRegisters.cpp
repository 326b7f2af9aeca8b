//===- GPUKernelRegisters.cpp - one resident block for wide kernels -------===//
#include "moe/Conversion/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEGPUKERNELREGISTERS
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;

namespace {
/// Above this many threads a block, two resident blocks leave ptxas 32
/// registers a thread (a multiprocessor has 64K registers, 2048 threads).
constexpr int64_t kTwoBlocksThreads = 512;
/// Registers a thread of a kernel without tensor-core products may use.
constexpr int64_t kPlainKernelRegisters = 64;
/// Registers a thread of a kernel with `mma.sync` products may use: a
/// decode GEMM's step of loads in flight (DeepSeek-V3's routed gate/up:
/// 96 registers) and its accumulators.
constexpr int64_t kMmaKernelRegisters = 128;
constexpr int64_t kMultiprocessorRegisters = 64 * 1024;

/// Whether `func` contains an op of one of `Ops`.
template <typename... Ops> bool contains(gpu::GPUFuncOp func) {
  return func
      .walk([](Operation *op) {
        return isa<Ops...>(op) ? WalkResult::interrupt() : WalkResult::advance();
      })
      .wasInterrupted();
}

struct MoEGPUKernelRegistersPass
    : moe::impl::MoEGPUKernelRegistersBase<MoEGPUKernelRegistersPass> {
  void runOnOperation() override {
    getOperation()->walk([&](gpu::GPUFuncOp func) {
      std::optional<ArrayRef<int32_t>> block = func.getKnownBlockSize();
      if (!func.isKernel() || !block)
        return;
      int64_t threads = 1;
      for (int32_t extent : *block)
        threads *= extent;
      int64_t resident = 0;
      if (threads > kTwoBlocksThreads)
        resident = 1;
      else if (!contains<NVVM::MmaOp, NVVM::WgmmaMmaAsyncOp>(func))
        resident =
            std::max<int64_t>(1, kMultiprocessorRegisters / (threads * kPlainKernelRegisters));
      else if (!contains<NVVM::WgmmaMmaAsyncOp>(func))
        resident = std::max<int64_t>(1, kMultiprocessorRegisters / (threads * kMmaKernelRegisters));
      if (resident)
        func->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
                      IntegerAttr::get(IntegerType::get(&getContext(), 32), resident));
    });
  }
};
} // namespace
