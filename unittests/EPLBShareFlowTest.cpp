//===- EPLBShareFlowTest.cpp - Best token shares for a placement ----------===//
#include "moe/EPLB/ShareFlow.h"

#include "gtest/gtest.h"

using namespace mlir::moe::eplb;

namespace {
TEST(EPLBShareFlow, SpreadsASharedExpert) {
  // Device 0 holds experts 0 and 1, device 1 experts 1 and 2. With loads
  // 10, 6, 2 expert 0 alone decides (10); with 4, 10, 8 expert 1 sends 7
  // tokens to device 0 and 3 to device 1: 11 on both.
  Placement p{{0, 1, 1, 2}, {}};
  double peak = optimizeShares(p, {10, 6, 2}, 2);
  EXPECT_NEAR(peak, 10, 1e-9);
  Placement q{{0, 1, 1, 2}, {}};
  EXPECT_NEAR(optimizeShares(q, {4, 10, 8}, 2), 11, 1e-9);
  EXPECT_NEAR(q.share[1] + q.share[2], 1, 1e-12);
  EXPECT_NEAR(q.share[1], 0.7, 1e-9);
}

TEST(EPLBShareFlow, TightestSetDecides) {
  // Expert 0 alone on device 0 with 30 tokens: nothing can help it.
  std::vector<std::vector<int64_t>> devicesOf = {{0}, {1, 2}, {1, 2}};
  EXPECT_NEAR(minPeakWithShares({30, 6, 6}, devicesOf, 3), 30, 1e-9);
  EXPECT_NEAR(minPeakWithShares({3, 6, 6}, devicesOf, 3), 6, 1e-9);
}

TEST(EPLBShareFlow, NoLoadNoPeak) {
  Placement p{{0, 1}, {}};
  EXPECT_EQ(optimizeShares(p, {0, 0}, 2), 0);
  EXPECT_EQ(p.share, (std::vector<double>{1, 1}));
}
} // namespace
