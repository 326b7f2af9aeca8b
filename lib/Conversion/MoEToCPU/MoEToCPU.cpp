//===- MoEToCPU.cpp - the CPU code-generation strategy of moe ops ---------===//
#include "CPUPatterns.h"
#include "moe/Conversion/Passes.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::moe {
#define GEN_PASS_DEF_CONVERTMOETOCPU
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
struct ConvertMoEToCPUPass
    : moe::impl::ConvertMoEToCPUBase<ConvertMoEToCPUPass> {
  using Base::Base;

  void runOnOperation() override {
    // The register tile is unrolled into the IR: bound it by what a register
    // file could hold (register-rows=100000 took 23 s in this pass alone).
    constexpr int64_t kMaxLanes = 64, kMaxTile = 32, kMaxColumnBlock = 4096;
    if (vectorWidth < 1 || vectorWidth > kMaxLanes || registerRows < 1 || registerRows > kMaxTile ||
        registerCols < 1 || registerCols > kMaxTile || columnBlock < registerCols ||
        columnBlock > kMaxColumnBlock || columnBlock % registerCols != 0 || packedMinRows < 0 ||
        (bf16Dot && vectorWidth != 16)) {
      getOperation()->emitError("convert-moe-to-cpu: vector-width must be in [1, ")
          << kMaxLanes << "], register-rows and register-cols in [1, " << kMaxTile
          << "], column-block a multiple of register-cols up to " << kMaxColumnBlock
          << "; packed-min-rows must not be negative; bf16-dot needs vector-width 16";
      return signalPassFailure();
    }
    cpu::CpuCodegenOptions options;
    options.vectorWidth = vectorWidth;
    options.registerRows = registerRows;
    options.registerCols = registerCols;
    options.columnBlock = columnBlock;
    options.packedMinRows = packedMinRows;
    options.bf16Dot = bf16Dot;
    RewritePatternSet patterns(&getContext());
    cpu::populateCpuGroupedMatmulPatterns(patterns, options);
    cpu::populateCpuRoutePatterns(patterns, options);
    cpu::populateCpuDispatchPatterns(patterns, options);
    // Each pattern replaces its op once; nothing needs folding in between.
    GreedyRewriteConfig config;
    config.setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
    config.enableFolding(false);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns), config)))
      signalPassFailure();
  }
};
} // namespace
