//===- MoEAttrs.h - moe attributes ------------------------------*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOEATTRS_H
#define MOE_DIALECT_MOE_IR_MOEATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"

#include "moe/Dialect/MoE/IR/MoEEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "moe/Dialect/MoE/IR/MoEAttrs.h.inc"

#endif // MOE_DIALECT_MOE_IR_MOEATTRS_H
