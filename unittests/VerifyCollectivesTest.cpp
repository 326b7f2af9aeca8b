//===- VerifyCollectivesTest.cpp - moe-verify-collectives on small modules ===//
// The decision of this pass is a property of IR (which values are uniform
// across ranks), so its unit tests run it on parsed modules and read the
// diagnostics.
#include "moe/Dialect/MoE/Transforms/Passes.h"
#include "moe/InitAll.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {
/// Runs the pass on `source` inside a function whose arguments are `%x`
/// (rank-local tokens) and `%phase` (i1, uniform); returns the diagnostics,
/// empty when the module is accepted.
std::string verify(const std::string &body) {
  DialectRegistry registry;
  moe::registerMoECompilerDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
    diagnostics += d.str() + "\n";
    return success();
  });
  std::string source = R"(
func.func @f(%x: tensor<?x64xf32>, %phase: i1 {moe.uniform}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %x, %c0 : tensor<?x64xf32>
  %local = arith.cmpi ugt, %t, %c1 : index
)" + body + R"(
  return
})";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context);
  EXPECT_TRUE(module) << diagnostics;
  if (!module)
    return diagnostics;
  PassManager pm(&context);
  pm.addPass(moe::createMoEVerifyCollectives());
  bool ok = succeeded(pm.run(*module));
  EXPECT_EQ(ok, diagnostics.empty()) << diagnostics;
  return diagnostics;
}

const char *kAgree = "%n = moe.agree_count %t : index\n";
} // namespace

TEST(VerifyCollectives, AcceptsCollectivesUnderUniformConditions) {
  EXPECT_EQ(verify(std::string("scf.if %phase {\n") + kAgree + "}"), "");
  EXPECT_EQ(verify(std::string(kAgree) + "scf.for %i = %c0 to %n step %c1 {\n"
                                         "  %m = moe.agree_count %t : index\n}"),
            "");
}

TEST(VerifyCollectives, RejectsACollectiveUnderRankLocalData) {
  std::string error = verify(std::string("scf.if %local {\n") + kAgree + "}");
  EXPECT_NE(error.find("collective under control flow that can differ between ranks"),
            std::string::npos)
      << error;
}

TEST(VerifyCollectives, RejectsALoopWhoseTripCountIsNotAgreed) {
  std::string error =
      verify(std::string("scf.for %i = %c0 to %t step %c1 {\n") + kAgree + "}");
  EXPECT_NE(error.find("the scf.for trip count is not agreed across ranks"),
            std::string::npos)
      << error;
}
