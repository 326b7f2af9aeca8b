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
      llvm::APFloat(scale), false, false, false);
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

// Issue 9: a scale that is not a normal f32 would lower to 0, +inf or a
// subnormal constant (routing_c5).
TEST(RoutingAttr, ScaleMustBeANormalF32) {
  EXPECT_EQ(routingError(2, 1, 1, 1e-50).rfind("routing_c5:", 0), 0u);
  EXPECT_EQ(routingError(2, 1, 1, 1e39).rfind("routing_c5:", 0), 0u);
  EXPECT_EQ(routingError(2, 1, 1, 1e-40).rfind("routing_c5:", 0), 0u); // subnormal
  EXPECT_EQ(routingError(2, 1, 1, 0x1p-126), "");                       // FLT_MIN
  EXPECT_EQ(routingError(2, 1, 1, 3.4028234e38), "");                   // ~FLT_MAX
  EXPECT_EQ(routingError(2, 1, 1, 1e-30), "");
}

// Issue 9: top_k and n_group are bounded by limits::kMaxTopK (routing_c6).
TEST(RoutingAttr, TopKAndGroupsAreBounded) {
  EXPECT_EQ(routingError(int64_t(1) << 62, 1, 1, 1.0).rfind("routing_c6:", 0), 0u);
  EXPECT_EQ(routingError(2, int64_t(1) << 62, 1, 1.0).rfind("routing_c6:", 0), 0u);
  EXPECT_EQ(routingError(1024, 1024, 1024, 1.0), "");
}
} // namespace
