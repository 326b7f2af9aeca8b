//===- EPLBBatchBalanceTest.cpp - Per-batch replica selection -------------===//
#include "moe/EPLB/BatchBalance.h"

#include "gtest/gtest.h"

using namespace mlir::moe::eplb;

namespace {
TEST(EPLBBatchBalance, ReplicasTakeWhatLevelsTheDevices) {
  // Slots 0, 1 on device 0 (experts 0 and 1), slots 2, 3 on device 1
  // (experts 0 and 2). This batch: 10 tokens of expert 0, 2 of expert 1.
  // Expert 0 sends 4 to device 0 and 6 to device 1: 6 on both, where its
  // planned even split would leave 7 and 5.
  Placement p{{0, 1, 0, 2}, {0.5, 1, 0.5, 1}};
  std::vector<double> slotTokens;
  EXPECT_NEAR(balanceBatch(p, {10, 2, 0}, 2, &slotTokens), 6, 1e-9);
  EXPECT_NEAR(peakLoad(p, {10, 2, 0}, 2), 7, 1e-9);
  ASSERT_EQ(slotTokens.size(), 4u);
  EXPECT_NEAR(slotTokens[0], 4, 1e-9);
  EXPECT_NEAR(slotTokens[1], 2, 1e-9);
  EXPECT_NEAR(slotTokens[2], 6, 1e-9);
  EXPECT_NEAR(slotTokens[3], 0, 1e-9);
}

TEST(EPLBBatchBalance, AllTokensToAnExpertReplicatedEverywhere) {
  // Expert 0 has a replica on each of 4 devices and gets the whole batch:
  // every device takes a quarter.
  Placement p{{0, 1, 0, 2, 0, 3, 0, 4}, {}};
  setEvenShares(p, 5);
  std::vector<double> slotTokens;
  EXPECT_NEAR(balanceBatch(p, {1000, 0, 0, 0, 0}, 4, &slotTokens), 250, 1e-9);
  for (int slot : {0, 2, 4, 6})
    EXPECT_NEAR(slotTokens[slot], 250, 1e-9);
}

TEST(EPLBBatchBalance, NeverAbovePlannedShares) {
  // Whatever the batch, the best split is at most the planned one's peak.
  Placement p{{0, 1, 2, 0, 3, 1}, {}};
  setEvenShares(p, 4);
  for (std::vector<double> counts :
       {std::vector<double>{9, 1, 4, 4}, {0, 12, 1, 0}, {3, 3, 3, 3}, {0, 0, 0, 7}})
    EXPECT_LE(balanceBatch(p, counts, 2), peakLoad(p, counts, 2) + 1e-9);
}
} // namespace
