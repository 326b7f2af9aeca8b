//===- DropPhaseVariants.cpp - erase inlined prefill/decode variants ------===//
#include "moe/Dialect/MoE/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEDROPPHASEVARIANTS
#include "moe/Dialect/MoE/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;

namespace {
struct MoEDropPhaseVariantsPass
    : moe::impl::MoEDropPhaseVariantsBase<MoEDropPhaseVariantsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::SetVector<func::FuncOp> unused; // a variant named twice is erased once
    for (auto entry : module.getOps<func::FuncOp>()) {
      auto plan = entry->getAttrOfType<DictionaryAttr>("moe.phase_plan");
      if (!plan)
        continue;
      for (StringRef phase : {"prefill", "decode"}) {
        auto name = dyn_cast_or_null<StringAttr>(plan.get(phase));
        auto variant = name ? module.lookupSymbol<func::FuncOp>(name) : func::FuncOp();
        if (variant && SymbolTable::symbolKnownUseEmpty(variant, module))
          unused.insert(variant);
      }
    }
    for (func::FuncOp variant : unused)
      variant.erase();
    numDropped += unused.size();
  }
};
} // namespace
