//===- EPLBRobustTest.cpp - Planning over several time windows ------------===//
#include "moe/EPLB/Robust.h"

#include "gtest/gtest.h"

#include <algorithm>

using namespace mlir::moe::eplb;

namespace {
// Two windows in which the hot expert moves from 0 to 1.
const std::vector<std::vector<double>> kMoving = {
    {400, 100, 100, 100, 100, 100, 100, 100},
    {100, 400, 100, 100, 100, 100, 100, 100}};
const Topology kTopology{12, 4, 1, 1};

TEST(EPLBRobust, AggregatesPerExpert) {
  EXPECT_EQ(robustLoad(kMoving, Robust::Mean, 0)[0], 250);
  EXPECT_EQ(robustLoad(kMoving, Robust::Max, 0)[1], 400);
  EXPECT_EQ(robustLoad(kMoving, Robust::MeanStd, 2)[0], 250 + 2 * 150);
  EXPECT_EQ(robustLoad(kMoving, Robust::MeanStd, 2)[2], 100);
}

TEST(EPLBRobust, ReportsEveryWindow) {
  LayerPlan plan =
      planWindows(kMoving, kTopology, PlanOptions(), Robust::Mean, 0);
  std::vector<double> ratios =
      windowRatios(plan.placement, kMoving, kTopology.devices);
  ASSERT_EQ(ratios.size(), 2u);
  for (double r : ratios)
    EXPECT_GE(r, 1.0);
}

// Planning for the worst window is never worse in its worst window than
// planning for the mean, the max, mean + k std or DeepSeek's plan.
TEST(EPLBRobust, WorstIsBestInTheWorstWindow) {
  auto worstOf = [&](const LayerPlan &plan) {
    std::vector<double> r =
        windowRatios(plan.placement, kMoving, kTopology.devices);
    return *std::max_element(r.begin(), r.end());
  };
  double worst =
      worstOf(planWindows(kMoving, kTopology, PlanOptions(), Robust::Worst, 0));
  for (Robust kind : {Robust::Mean, Robust::Max, Robust::MeanStd})
    EXPECT_LE(worst, worstOf(planWindows(kMoving, kTopology, PlanOptions(),
                                         kind, 1.0)) +
                         1e-12);
  PlanOptions deepseek{Algorithm::DeepSeek};
  EXPECT_LE(worst, worstOf(planLayer(robustLoad(kMoving, Robust::Mean, 0),
                                     kTopology, deepseek)) +
                       1e-12);
  // Both hot experts get replicas, so neither window overloads a device.
  LayerPlan max =
      planWindows(kMoving, kTopology, PlanOptions(), Robust::Max, 0);
  std::vector<int64_t> counts = replicaCounts(max.placement, 8);
  EXPECT_GE(counts[0], 2);
  EXPECT_GE(counts[1], 2);
}

TEST(EPLBRobust, OneWindowIsPlainPlanning) {
  std::vector<std::vector<double>> one = {kMoving[0]};
  LayerPlan a = planWindows(one, kTopology, PlanOptions(), Robust::Max, 3);
  LayerPlan b = planLayer(kMoving[0], kTopology, PlanOptions());
  EXPECT_EQ(a.placement.phy2log, b.placement.phy2log);
}
} // namespace
