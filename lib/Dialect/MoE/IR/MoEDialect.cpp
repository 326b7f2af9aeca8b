//===- MoEDialect.cpp - moe dialect registration --------------------------===//
#include "moe/Dialect/MoE/IR/MoEDialect.h"

#include "mlir/Transforms/InliningUtils.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::moe;

#include "moe/Dialect/MoE/IR/MoEDialect.cpp.inc"

namespace {
/// moe ops have no region and no tie to their function: a call of a layer
/// (a phase variant) may be inlined into its caller.
struct MoEInlinerInterface : DialectInlinerInterface {
  using DialectInlinerInterface::DialectInlinerInterface;
  bool isLegalToInline(Operation *, Region *, bool, IRMapping &) const final { return true; }
};
} // namespace

void MoEDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "moe/Dialect/MoE/IR/MoEOps.cpp.inc"
      >();
  addInterfaces<MoEInlinerInterface>();
}
