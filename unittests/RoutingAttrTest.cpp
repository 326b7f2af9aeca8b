//===- RoutingAttrTest.cpp - routing attribute rules ----------------------===//
#include "moe/Dialect/MoE/IR/MoEAttrs.h"
#include "moe/Dialect/MoE/IR/MoEDialect.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "gtest/gtest.h"

using namespace mlir;
using namespace mlir::moe;

namespace {
/// Builds a routing attribute; returns the verifier's message or "".
std::string routingError(int64_t topK, int64_t nGroup, int64_t topkGroup,
                         double scale) {
  MLIRContext context;
  context.loadDialect<MoEDialect>();
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  auto attr = RoutingAttr::getChecked(
      [&] { return emitError(UnknownLoc::get(&context)); }, &context,
      ScoreFunction::sigmoid, topK, nGroup, topkGroup, true,
      llvm::APFloat(scale), false);
  EXPECT_EQ(static_cast<bool>(attr), message.empty());
  return message;
}

TEST(RoutingAttr, AcceptsDeepSeekV3Routing) {
  EXPECT_EQ(routingError(8, 8, 4, 2.5), "");
}

TEST(RoutingAttr, RulesHaveTheirIds) {
  EXPECT_EQ(routingError(0, 1, 1, 1.0).rfind("routing_c1:", 0), 0u);
  EXPECT_EQ(routingError(2, 0, 1, 1.0).rfind("routing_c2:", 0), 0u);
  EXPECT_EQ(routingError(2, 4, 5, 1.0).rfind("routing_c3:", 0), 0u);
  EXPECT_EQ(routingError(2, 4, 0, 1.0).rfind("routing_c3:", 0), 0u);
  EXPECT_EQ(routingError(2, 1, 1, 0.0).rfind("routing_c4:", 0), 0u);
  EXPECT_EQ(routingError(2, 1, 1, -1.0).rfind("routing_c4:", 0), 0u);
}
} // namespace
