//===- GPUModuleToBinary.cpp - kernels serialized in parallel -------------===//
#include "moe/Conversion/Passes.h"

#include "mlir/Dialect/GPU/IR/CompilationInterfaces.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/Threading.h"
#include "llvm/ADT/StringSwitch.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEGPUMODULETOBINARY
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;

namespace {
struct MoEGPUModuleToBinaryPass
    : moe::impl::MoEGPUModuleToBinaryBase<MoEGPUModuleToBinaryPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp top = getOperation();
    std::optional<gpu::CompilationTarget> target =
        llvm::StringSwitch<std::optional<gpu::CompilationTarget>>(format)
            .Cases("llvm", "offloading", gpu::CompilationTarget::Offload)
            .Cases("isa", "assembly", gpu::CompilationTarget::Assembly)
            .Cases("bin", "binary", gpu::CompilationTarget::Binary)
            .Cases("fatbin", "fatbinary", gpu::CompilationTarget::Fatbin)
            .Default(std::nullopt);
    if (!target) {
      top.emitError("moe-gpu-module-to-binary: format '")
          << format << "' is not llvm, isa, bin or fatbin";
      return signalPassFailure();
    }
    // Built before the threads start: they only read it.
    SymbolTable symbols(top);
    gpu::TargetOptions options({}, {}, {}, {}, *target, [&]() { return &symbols; });

    SmallVector<gpu::GPUModuleOp> modules(top.getOps<gpu::GPUModuleOp>());
    SmallVector<SmallVector<Attribute>> objects(modules.size());
    for (gpu::GPUModuleOp module : modules)
      if (!module.getTargetsAttr() || module.getTargetsAttr().empty()) {
        module.emitError("moe-gpu-module-to-binary: the module has no target attributes");
        return signalPassFailure();
      }
    auto serialize = [&](size_t i) -> LogicalResult {
      gpu::GPUModuleOp module = modules[i];
      for (Attribute attr : module.getTargetsAttr()) {
        auto target = dyn_cast<gpu::TargetAttrInterface>(attr);
        if (!target)
          return module.emitError("moe-gpu-module-to-binary: ")
                 << attr << " is not a GPU target attribute";
        std::optional<SmallVector<char, 0>> bytes = target.serializeToObject(module, options);
        if (!bytes)
          return module.emitError("moe-gpu-module-to-binary: serializing for ")
                 << attr << " failed";
        Attribute object = target.createObject(module, *bytes, options);
        if (!object)
          return module.emitError("moe-gpu-module-to-binary: no object for ") << attr;
        objects[i].push_back(object);
      }
      return success();
    };
    if (failed(failableParallelForEachN(&getContext(), 0, modules.size(), serialize)))
      return signalPassFailure();

    for (auto [module, moduleObjects] : llvm::zip_equal(modules, objects)) {
      OpBuilder builder(module);
      builder.setInsertionPointAfter(module);
      gpu::BinaryOp::create(builder, module.getLoc(), module.getName(),
                            module.getOffloadingHandlerAttr(), moduleObjects);
      module->erase();
    }
  }
};
} // namespace
