//===- InitAll.h - what the moe tools register ------------------*- C++ -*-===//
#ifndef MOE_INITALL_H
#define MOE_INITALL_H

#include "mlir/IR/DialectRegistry.h"

namespace mlir::moe {
/// The dialects, interfaces and translations the moe pipelines need.
void registerMoECompilerDialects(DialectRegistry &registry);
/// Our passes and pipelines, plus the upstream passes the pipelines use.
void registerMoECompilerPasses();
} // namespace mlir::moe

#endif // MOE_INITALL_H
