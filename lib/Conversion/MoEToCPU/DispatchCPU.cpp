//===- DispatchCPU.cpp - moe.dispatch as a counting sort by a scan --------===//
#include "CPUPatterns.h"

using namespace mlir;
using namespace mlir::moe;

void cpu::populateCpuDispatchPatterns(RewritePatternSet &, const CpuCodegenOptions &) {}
