//===- EPLBRobustTest.cpp - Planning over several time windows ------------===//
#include "moe/EPLB/Robust.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>

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

// Expert 0 takes 200 tokens in both windows; experts 1 and 2 take 300 in one
// and none in the other (mean 150, standard deviation 150).
const std::vector<std::vector<double>> kVolatile = {
    {200, 300, 0, 100, 100, 100, 100, 100},
    {200, 0, 300, 100, 100, 100, 100, 100}};
const Topology kNineSlots{9, 3, 1, 1};

TEST(EPLBRobust, NextFitsMeanPlusHalfADeviationOfScaledWindows) {
  std::vector<double> next = robustLoad(kVolatile, Robust::Next, 0);
  EXPECT_DOUBLE_EQ(next[0], 200);
  EXPECT_DOUBLE_EQ(next[1], 150 + 0.5 * 150);
  EXPECT_DOUBLE_EQ(next[3], 100);
  // A window with twice the traffic counts as much: the windows are scaled
  // to the mean of their totals (1.5 times the first one's).
  std::vector<std::vector<double>> scaled = kVolatile;
  for (double &x : scaled[1])
    x *= 2;
  std::vector<double> fromScaled = robustLoad(scaled, Robust::Next, 0);
  for (size_t e = 0; e < next.size(); ++e)
    EXPECT_DOUBLE_EQ(fromScaled[e], 1.5 * next[e]) << "expert " << e;
}

TEST(EPLBRobust, NextReplicatesWhatVaries) {
  // The one extra slot: for the mean it goes to expert 0 (200 > 150); for
  // the next window to a varying expert (150 + 150 > 200).
  LayerPlan mean =
      planWindows(kVolatile, kNineSlots, PlanOptions(), Robust::Mean, 0);
  EXPECT_EQ(replicaCounts(mean.placement, 8)[0], 2);
  // The future plan itself: on a layer this small the sample objective's
  // plan, which fills the gaps, would replace it.
  PlanOptions future;
  future.futureSampleCost = INFINITY;
  LayerPlan next = planWindows(kVolatile, kNineSlots, future, Robust::Next, 0);
  ASSERT_EQ(checkPlacement(next.placement, 8, kNineSlots), "");
  std::vector<int64_t> counts = replicaCounts(next.placement, 8);
  EXPECT_EQ(counts[0], 1);
  EXPECT_EQ(counts[1] + counts[2], 3);
}
} // namespace
