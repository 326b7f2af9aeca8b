//===- hf_config_fuzzer.cpp - fuzzes the config.json importer -------------===//
//
// Bytes -> parseHFConfig; a config it accepts is built into a layer module
// for one and two EP ranks, verified and described by layerPlan. Nothing may
// crash: every rejection is an error value or a diagnostic.
//
//===----------------------------------------------------------------------===//
#include "moe/Import/HFConfig.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <cstdint>

using namespace mlir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // buildLayerModule loads the dialects it needs.
  static MLIRContext *context = new MLIRContext();
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<moe::MoELayerConfig> config = moe::parseHFConfig(text);
  if (!config) {
    llvm::consumeError(config.takeError());
    return 0;
  }
  ScopedDiagnosticHandler quiet(context, [](Diagnostic &) { return success(); });
  for (int64_t ep : {1, 2}) {
    moe::ParallelLayout layout{ep, 64, 1, 0};
    Type elem = ep == 1 ? Type(Float32Type::get(context))
                        : Type(BFloat16Type::get(context));
    OwningOpRef<ModuleOp> module = moe::buildLayerModule(
        *context, *config, layout, elem, UnknownLoc::get(context), "layer");
    if (module)
      (void)verify(*module);
    (void)moe::layerPlan(*config, layout, ep == 1 ? "f32" : "bf16", "layer");
  }
  return 0;
}
