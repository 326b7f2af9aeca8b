//===- MoEDialect.h - moe dialect -------------------------------*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOEDIALECT_H
#define MOE_DIALECT_MOE_IR_MOEDIALECT_H

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Dialect.h"

#include "moe/Dialect/MoE/IR/MoEDialect.h.inc"

namespace mlir::moe {
/// The string argument attribute naming a layer function's argument as the
/// plan does (moe-compile --config sets it); moe-check-entry-memrefs names
/// arguments by it.
inline constexpr const char kArgumentName[] = "moe.name";
} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_IR_MOEDIALECT_H
