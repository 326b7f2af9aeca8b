//===- MoEDialect.h - moe dialect -------------------------------*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOEDIALECT_H
#define MOE_DIALECT_MOE_IR_MOEDIALECT_H

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Dialect.h"

#include "moe/Dialect/MoE/IR/MoEDialect.h.inc"

#endif // MOE_DIALECT_MOE_IR_MOEDIALECT_H
