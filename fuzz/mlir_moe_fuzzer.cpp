//===- mlir_moe_fuzzer.cpp - bytes -> parser -> verifier -> moe passes ----===//
//
// libFuzzer target for the moe dialect and its passes. Each input is parsed
// as MLIR (the dialects the moe tools register) in a fresh context and
// verified; when it is valid:
//   1. it is printed and parsed back, and must verify again (printer/parser
//      round trip of the custom assembly formats);
//   2. every moe pass (and a few chains of them, as the pipelines run them)
//      runs on its own clone. A pass may fail with a diagnostic; a pass that
//      reports success must leave IR that verifies.
// Diagnostics are swallowed: only crashes, sanitizer reports and the two
// invariants above (which abort) count.
//
//===----------------------------------------------------------------------===//

#include "moe/InitAll.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace mlir;

namespace {
/// Each pass alone, with the options the lit tests use, and the front half
/// of the CPU pipeline (what moe-compile runs before bufferization).
const char *const kPipelines[] = {
    "moe-decompose-layer",
    "moe-plan-chunks{budget-bytes=100000 max-tokens-per-rank=4096}",
    "moe-plan-chunks{budget-bytes=1 max-tokens-per-rank=1}",
    "moe-specialize-phase{decode-max-tokens=8}",
    "moe-plan-buffers",
    "moe-fuse-quant-dispatch",
    "moe-fuse-quant-dispatch{scheme=fp8-e4m3-g32-ue8m0 gemm-consumes-fp8=false}",
    "moe-dedupe-tp-dispatch",
    "moe-verify-collectives",
    "convert-moe-to-linalg",
    "convert-moe-to-cpu",
    "convert-moe-to-runtime",
    "moe-decompose-layer,convert-moe-to-linalg,moe-verify-collectives",
    // moe-compile's order: phases, then chunks, then the CPU front half.
    "moe-specialize-phase{decode-max-tokens=8},"
    "moe-plan-chunks{budget-bytes=100000 max-tokens-per-rank=4096},"
    "moe-dedupe-tp-dispatch,"
    "moe-decompose-layer,moe-fuse-quant-dispatch,moe-plan-buffers,"
    "convert-moe-to-cpu,convert-moe-to-linalg,moe-verify-collectives,"
    "convert-moe-to-runtime",
};

DialectRegistry *registry;
bool verbose;

[[noreturn]] void fail(const char *what, const std::string &detail,
                       const std::string &ir) {
  fprintf(stderr, "mlir_moe_fuzzer: %s\n%s\n--- IR ---\n%s\n", what,
          detail.c_str(), ir.c_str());
  fflush(stderr);
  abort();
}

std::string print(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os, OpPrintingFlags().printGenericOpForm(false));
  return text;
}
} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  registry = new DialectRegistry();
  moe::registerMoECompilerDialects(*registry);
  moe::registerMoECompilerPasses();
  verbose = getenv("MOE_FUZZ_VERBOSE") != nullptr;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MLIRContext context(*registry, MLIRContext::Threading::DISABLED);
  // Everything the parser, verifier and passes report goes here; printed
  // only with MOE_FUZZ_VERBOSE or when an invariant breaks.
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    llvm::raw_string_ostream os(diagnostics);
    os << diag << "\n";
    for (Diagnostic &note : diag.getNotes())
      os << "  note: " << note << "\n";
    return success();
  });

  std::string source(reinterpret_cast<const char *>(data), size);
  ParserConfig config(&context);
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(source, config, "fuzz-input");
  if (!module || failed(verify(*module))) {
    if (verbose)
      fprintf(stderr, "rejected:\n%s\n", diagnostics.c_str());
    return 0;
  }

  // Round trip: what the printer writes must parse back and verify.
  std::string printed = print(*module);
  diagnostics.clear();
  OwningOpRef<ModuleOp> reparsed =
      parseSourceString<ModuleOp>(printed, config, "printed");
  if (!reparsed || failed(verify(*reparsed)))
    fail("printed IR does not parse back or verify", diagnostics, printed);
  reparsed = nullptr;

  for (const char *pipeline : kPipelines) {
    OwningOpRef<ModuleOp> clone = cast<ModuleOp>((*module)->clone());
    PassManager pm(&context);
    // Verified here instead: a pass that fails may leave anything behind.
    pm.enableVerifier(false);
    std::string errors;
    llvm::raw_string_ostream errorStream(errors);
    if (failed(parsePassPipeline(pipeline, pm, errorStream)))
      fail("pass pipeline does not parse", errors, pipeline);
    diagnostics.clear();
    if (failed(pm.run(*clone))) {
      if (verbose)
        fprintf(stderr, "%s failed:\n%s\n", pipeline, diagnostics.c_str());
      continue;
    }
    if (failed(verify(*clone)))
      fail((std::string("'") + pipeline +
            "' succeeded but its output does not verify")
               .c_str(),
           diagnostics, print(*clone) + "\n--- input ---\n" + printed);
    if (verbose)
      fprintf(stderr, "%s succeeded\n", pipeline);
  }
  return 0;
}
