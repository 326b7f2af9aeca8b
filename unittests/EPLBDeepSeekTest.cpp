//===- EPLBDeepSeekTest.cpp - DeepSeek's EPLB reproduced exactly ----------===//
#include "moe/EPLB/DeepSeek.h"

#include "gtest/gtest.h"

using namespace mlir::moe::eplb;

namespace {
// The example of deepseek-ai/EPLB's README: 2 layers x 12 experts, 16 slots,
// 4 groups, 2 nodes, 8 GPUs, with the published phy2log.
TEST(DeepSeekEPLB, ReadmeHierarchicalExample) {
  Topology t{16, 8, 2, 4};
  std::vector<double> layer0 = {90, 132, 40, 61, 104, 165,
                                39, 4,   73, 56, 183, 86};
  std::vector<double> layer1 = {20,  107, 104, 64, 19, 197,
                                187, 157, 172, 86, 16, 27};
  EXPECT_EQ(deepseekPlacement(layer0, t).phy2log,
            (std::vector<int64_t>{5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1,
                                  11, 1}));
  EXPECT_EQ(
      deepseekPlacement(layer1, t).phy2log,
      (std::vector<int64_t>{7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1}));
}

// DeepSeek's greedy gives 232 on FlashLB's example, and puts two of the five
// replicas of expert 1 on one device.
TEST(DeepSeekEPLB, FlashLBExampleGives232) {
  Topology t{16, 8, 1, 1};
  std::vector<double> load = {600, 560, 120, 120, 20, 10, 10, 10};
  Placement p = deepseekPlacement(load, t);
  EXPECT_EQ(checkPlacement(p, 8, t, /*allowSameDevice=*/true), "");
  EXPECT_EQ(checkPlacement(p, 8, t), "device 7 holds two replicas of expert 1");
  EXPECT_EQ(replicaCounts(p, 8),
            (std::vector<int64_t>{5, 5, 1, 1, 1, 1, 1, 1}));
  EXPECT_DOUBLE_EQ(peakLoad(p, load, 8), 232);
}
} // namespace
