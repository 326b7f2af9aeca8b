//===- PlanReport.h - the JSON plan report of moe-compile -------*- C++ -*-===//
#ifndef MOE_TOOLS_MOECOMPILE_PLANREPORT_H
#define MOE_TOOLS_MOECOMPILE_PLANREPORT_H

#include "moe/Import/HFConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/JSON.h"

namespace moe_compile {

/// The layer's plan (shapes, routing, ABI) plus what the planning passes
/// decided: the chunking (from `moe.chunk_plan`) and every MoE buffer with
/// its formula and size at the planned maxima.
/// Fails when a size of the plan does not fit 64 bits.
llvm::Expected<llvm::json::Value>
planReport(mlir::ModuleOp module, const mlir::moe::MoELayerConfig &config,
           const mlir::moe::ParallelLayout &layout, llvm::StringRef elementType,
           llvm::StringRef dispatchQuantization, bool expertsReadCodes, bool dedupeTp,
           llvm::StringRef funcName, int64_t decodeMaxTokens, bool allGather, bool packInLayer);

} // namespace moe_compile

#endif // MOE_TOOLS_MOECOMPILE_PLANREPORT_H
