//===- Fingerprint.cpp - a layer's fingerprint for the ranks' agreement ---===//
#include "Fingerprint.h"
#include "moe/Conversion/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/xxhash.h"

#include <limits>

namespace mlir::moe {
#define GEN_PASS_DEF_MOEFINGERPRINT
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;

int64_t moe::fingerprintOf(ModuleOp module, llvm::StringRef options) {
  // Every flag set here: the defaults follow --mlir-print-* on the command
  // line, which must not change a layer's fingerprint.
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  OpPrintingFlags flags;
  flags.enableDebugInfo(false)
      .printGenericOpForm(false)
      .useLocalScope(false)
      .printValueUsers(false)
      .printUniqueSSAIDs(false)
      .printNameLocAsPrefix(false)
      .skipRegions(false)
      .elideLargeElementsAttrs(kNever)
      .printLargeElementsAttrWithHex(kNever)
      .elideLargeResourceString(kNever)
      .assumeVerified();
  Attribute stored = module->removeAttr(kFingerprintAttr);
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os, flags);
  os << "\n// " << options;
  if (stored)
    module->setAttr(kFingerprintAttr, stored);
  auto hash = int64_t(llvm::xxh3_64bits(text));
  return hash ? hash : 1;
}

namespace {
struct FingerprintPass : moe::impl::MoEFingerprintBase<FingerprintPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Builder b(module.getContext());
    // fp8-gemm decides nothing without a quantized dispatch.
    std::string options =
        llvm::formatv("dedupe-tp={0} quantization={1} fp8-gemm={2}", bool(dedupeTp),
                      quantization.getValue(), quantization != "none" && fp8Gemm);
    module->setAttr(moe::kFingerprintAttr,
                    b.getI64IntegerAttr(moe::fingerprintOf(module, options)));
  }
};
} // namespace
