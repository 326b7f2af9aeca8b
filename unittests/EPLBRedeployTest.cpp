//===- EPLBRedeployTest.cpp - Redeploy decisions and alignment ------------===//
#include "moe/EPLB/Assignment.h"
#include "moe/EPLB/Redeploy.h"

#include "gtest/gtest.h"

using namespace mlir::moe::eplb;

namespace {
const Topology kTopology{12, 4, 1, 1};
const std::vector<double> kLoad = {400, 100, 100, 100, 100, 100, 100, 100};

TEST(EPLBRedeploy, AssignmentFindsTheCheapestMatching) {
  std::vector<std::vector<double>> cost = {{4, 1, 3}, {2, 0, 5}, {3, 2, 2}};
  EXPECT_EQ(minCostAssignment(cost), (std::vector<int64_t>{1, 0, 2}));
}

TEST(EPLBRedeploy, AlignmentUndoesADevicePermutation) {
  LayerPlan plan = planLayer(kLoad, kTopology, PlanOptions());
  // The same placement with devices rotated and slots reversed.
  Placement shuffled = plan.placement;
  for (int64_t d = 0; d < 4; ++d)
    for (int64_t j = 0; j < 3; ++j) {
      shuffled.phy2log[((d + 1) % 4) * 3 + (2 - j)] =
          plan.placement.phy2log[d * 3 + j];
      shuffled.share[((d + 1) % 4) * 3 + (2 - j)] =
          plan.placement.share[d * 3 + j];
    }
  EXPECT_GT(movedReplicas(plan.placement, shuffled), 0);
  Placement aligned = alignToCurrent(shuffled, plan.placement, kTopology);
  EXPECT_EQ(movedReplicas(plan.placement, aligned), 0);
  EXPECT_DOUBLE_EQ(peakLoad(aligned, kLoad, 4), plan.peak);
}

TEST(EPLBRedeploy, KeepsAGoodPlacement) {
  LayerPlan plan = planLayer(kLoad, kTopology, PlanOptions());
  RedeployDecision d =
      decideRedeploy(plan.placement, kLoad, kTopology, PlanOptions(), 0.05);
  EXPECT_FALSE(d.redeploy);
  EXPECT_EQ(d.movedReplicas, 0);
  EXPECT_EQ(d.placement.phy2log, plan.placement.phy2log);
  EXPECT_NEAR(d.gain(), 0, 1e-12);
}

TEST(EPLBRedeploy, MovesWhenTheHotExpertMoves) {
  LayerPlan plan = planLayer(kLoad, kTopology, PlanOptions());
  std::vector<double> moved = {100, 100, 100, 100, 100, 100, 100, 400};
  RedeployDecision d =
      decideRedeploy(plan.placement, moved, kTopology, PlanOptions(), 0.05);
  EXPECT_TRUE(d.redeploy);
  EXPECT_GE(d.gain(), 0.05);
  EXPECT_GT(d.movedReplicas, 0);
  // Fewer moves than re-placing every slot, and it still balances.
  EXPECT_LT(d.movedReplicas, 12);
  EXPECT_EQ(d.movedReplicas, movedReplicas(plan.placement, d.placement));
  EXPECT_NEAR(peakOverAverage(d.placement, moved, 4), d.plannedRatio, 1e-12);
  EXPECT_EQ(checkPlacement(d.placement, 8, kTopology), "");
}

TEST(EPLBRedeploy, ThresholdIsHonoured) {
  LayerPlan plan = planLayer(kLoad, kTopology, PlanOptions());
  std::vector<double> moved = {100, 100, 100, 100, 100, 100, 100, 400};
  RedeployDecision d =
      decideRedeploy(plan.placement, moved, kTopology, PlanOptions(), 10.0);
  EXPECT_FALSE(d.redeploy);
  EXPECT_EQ(d.movedReplicas, 0);
  EXPECT_EQ(d.placement.phy2log, plan.placement.phy2log);
}

// With shares, re-weighting the current replicas moves nothing.
TEST(EPLBRedeploy, SharesCanRebalanceWithoutMoves) {
  PlanOptions options;
  options.shares = true;
  std::vector<double> load = {300, 300, 100, 100, 100, 100, 100, 100};
  LayerPlan plan = planLayer(load, kTopology, options);
  std::vector<double> shifted = {200, 400, 100, 100, 100, 100, 100, 100};
  RedeployDecision d =
      decideRedeploy(plan.placement, shifted, kTopology, options, 0.0);
  EXPECT_LE(d.plannedRatio, d.currentRatio);
  EXPECT_EQ(checkPlacement(d.placement, 8, kTopology), "");
}
} // namespace
