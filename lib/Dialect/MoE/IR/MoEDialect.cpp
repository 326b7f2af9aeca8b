//===- MoEDialect.cpp - moe dialect registration --------------------------===//
#include "moe/Dialect/MoE/IR/MoEDialect.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::moe;

#include "moe/Dialect/MoE/IR/MoEDialect.cpp.inc"

void MoEDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "moe/Dialect/MoE/IR/MoEOps.cpp.inc"
      >();
}
