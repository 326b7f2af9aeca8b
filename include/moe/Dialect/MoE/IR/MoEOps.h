//===- MoEOps.h - moe operations --------------------------------*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOEOPS_H
#define MOE_DIALECT_MOE_IR_MOEOPS_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "moe/Dialect/MoE/IR/MoEAttrs.h"
#include "moe/Dialect/MoE/IR/MoEDialect.h"

#define GET_OP_CLASSES
#include "moe/Dialect/MoE/IR/MoEOps.h.inc"

#endif // MOE_DIALECT_MOE_IR_MOEOPS_H
