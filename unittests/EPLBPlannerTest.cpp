//===- EPLBPlannerTest.cpp - Our balancer: golden examples and properties -===//
#include "moe/EPLB/DeepSeek.h"
#include "moe/EPLB/EvenPacking.h"
#include "moe/EPLB/ExactSearch.h"
#include "moe/EPLB/Pairing.h"
#include "moe/EPLB/Planner.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>

using namespace mlir::moe::eplb;

namespace {
const std::vector<double> kFlashLB = {600, 560, 120, 120, 20, 10, 10, 10};
const Topology kFlashLBTopology{16, 8, 1, 1};

TEST(EPLBPlanner, FlashLBEvenReaches196_67) {
  LayerPlan plan = planLayer(kFlashLB, kFlashLBTopology, PlanOptions());
  EXPECT_EQ(checkPlacement(plan.placement, 8, kFlashLBTopology), "");
  EXPECT_NEAR(plan.peak, 590.0 / 3.0, 1e-9);
  EXPECT_NEAR(peakLoad(plan.placement, kFlashLB, 8), 590.0 / 3.0, 1e-9);
  EXPECT_NEAR(plan.mean, 181.25, 1e-12);
  EXPECT_NEAR(plan.ratio(), 1.085, 5e-4);
  EXPECT_TRUE(plan.optimal);
}

TEST(EPLBPlanner, FlashLBSharesReaches181_25) {
  PlanOptions options;
  options.shares = true;
  LayerPlan plan = planLayer(kFlashLB, kFlashLBTopology, options);
  EXPECT_EQ(checkPlacement(plan.placement, 8, kFlashLBTopology), "");
  EXPECT_NEAR(plan.peak, 181.25, 1e-9);
  EXPECT_NEAR(peakLoad(plan.placement, kFlashLB, 8), 181.25, 1e-9);
  EXPECT_TRUE(plan.optimal);
}

// The exact search alone proves 196.67 optimal: nothing below it exists.
TEST(EPLBPlanner, ExactSearchProvesFlashLBOptimum) {
  Problem pr{kFlashLB, 8, 2};
  ExactResult below = exactEven(pr, 590.0 / 3.0 - 1e-6, 10000000);
  EXPECT_TRUE(below.complete);
  EXPECT_FALSE(below.placement.has_value());
  ExactResult found = exactEven(pr, 232, 10000000);
  ASSERT_TRUE(found.placement.has_value());
  EXPECT_NEAR(peakLoad(*found.placement, kFlashLB, 8), 590.0 / 3.0, 1e-9);
}

TEST(EPLBPlanner, ExactSharesReachesTheMean) {
  Problem pr{kFlashLB, 8, 2};
  ExactResult found = exactShares(pr, 232, 10000000);
  ASSERT_TRUE(found.placement.has_value());
  EXPECT_TRUE(found.complete);
  EXPECT_NEAR(peakLoad(*found.placement, kFlashLB, 8), 181.25, 1e-9);
}

// Without the exact search the heuristics alone must still beat FlashLB
// (205) and DeepSeek (232).
TEST(EPLBPlanner, HeuristicsAloneBeatFlashLB) {
  PlanOptions options;
  options.exactBudget = 0;
  LayerPlan plan = planLayer(kFlashLB, kFlashLBTopology, options);
  EXPECT_LT(plan.peak, 205);
}

// DeepSeek puts both replicas of expert 1 on device 1 (1100, as if it had
// one replica and a wasted slot). Under the rule that a device holds an
// expert once, 1122 is optimal with even shares; with shares ours is below
// DeepSeek again.
TEST(EPLBPlanner, WhenDeepSeekStacksReplicas) {
  std::vector<double> load = {572, 1100, 353};
  Topology t{4, 2, 1, 1};
  LayerPlan baseline = planLayer(load, t, PlanOptions{Algorithm::DeepSeek});
  EXPECT_DOUBLE_EQ(baseline.peak, 1100);
  EXPECT_NE(checkPlacement(baseline.placement, 3, t), "");
  LayerPlan even = planLayer(load, t, PlanOptions());
  EXPECT_DOUBLE_EQ(even.peak, 1122);
  EXPECT_TRUE(even.optimal);
  PlanOptions shares;
  shares.shares = true;
  LayerPlan uneven = planLayer(load, t, shares);
  EXPECT_NEAR(uneven.peak, 1012.5, 1e-9);
  EXPECT_EQ(checkPlacement(uneven.placement, 3, t), "");
}

TEST(EPLBPlanner, PairedPeakPairsOutsideIn) {
  // Pieces 300 300 | 280 280 | 120 120 | 20 10 10 10 -> 12 items, 6 pairs.
  std::vector<double> load = {600, 560, 240, 20, 10, 10, 10};
  EXPECT_DOUBLE_EQ(pairedPeak(load, {2, 2, 2, 1, 1, 1, 1}), 310);
}

TEST(EPLBPlanner, NodeAwareKeepsGroupsOnNodes) {
  std::vector<double> layer0 = {90, 132, 40, 61, 104, 165,
                                39, 4,   73, 56, 183, 86};
  Topology t{16, 8, 2, 4};
  LayerPlan plan = planLayer(layer0, t, PlanOptions());
  EXPECT_EQ(checkPlacement(plan.placement, 12, t), "");
  LayerPlan baseline = planLayer(layer0, t, PlanOptions{Algorithm::DeepSeek});
  EXPECT_LE(plan.peak, baseline.peak);
  for (int64_t s = 0; s < 16; ++s) {
    int64_t group = plan.placement.phy2log[s] / 3;
    for (int64_t u = 0; u < 16; ++u) {
      if (plan.placement.phy2log[u] / 3 == group) {
        EXPECT_EQ(s / 8, u / 8) << "group " << group << " spans two nodes";
      }
    }
  }
}

/// Random loads: Zipf-like with a few zeros.
std::vector<double> randomLoad(std::mt19937_64 &rng, int64_t experts) {
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<double> load(experts);
  for (int64_t e = 0; e < experts; ++e)
    load[e] = unit(rng) < 0.05
                  ? 0
                  : std::round(1000 / std::pow(1 + e, 0.8) * (0.5 + unit(rng)));
  std::shuffle(load.begin(), load.end(), rng);
  return load;
}

struct Case {
  int64_t experts, devices, perDevice, nodes, groups;
};

void checkProperties(const std::vector<double> &load, const Topology &t,
                     const std::string &name) {
  int64_t experts = static_cast<int64_t>(load.size());
  LayerPlan baseline = planLayer(load, t, PlanOptions{Algorithm::DeepSeek});
  EXPECT_EQ(checkPlacement(baseline.placement, experts, t, true), "") << name;
  PlanOptions even, shares, future;
  even.objective = Objective::Sample;
  shares.shares = true;
  even.exactBudget = shares.exactBudget = 20000;
  LayerPlan ours = planLayer(load, t, even);
  LayerPlan uneven = planLayer(load, t, shares);
  LayerPlan ahead = planLayer(load, t, future);
  EXPECT_EQ(checkPlacement(ahead.placement, experts, t), "") << name;
  for (double s : ahead.placement.share)
    EXPECT_GT(s, 0) << name;
  EXPECT_GE(ahead.peak, peakLowerBound(load, t, false) * (1 - 1e-9)) << name;
  // Every slot filled, every expert replicated, shares summing to 1, no
  // expert twice on a device.
  EXPECT_EQ(checkPlacement(ours.placement, experts, t), "") << name;
  EXPECT_EQ(checkPlacement(uneven.placement, experts, t), "") << name;
  for (double s : ours.placement.share)
    EXPECT_GT(s, 0) << name;
  // No replica with shares takes less than a tenth of an even share.
  std::vector<int64_t> count = replicaCounts(uneven.placement, experts);
  for (size_t p = 0; p < uneven.placement.share.size(); ++p) {
    int64_t e = uneven.placement.phy2log[p];
    if (load[e] > 0) {
      EXPECT_GE(uneven.placement.share[p], 0.1 / count[e] * (1 - 1e-9))
          << name << " slot " << p;
    }
  }
  double tol = 1e-9 * std::max(1.0, baseline.peak);
  EXPECT_NEAR(ours.peak, peakLoad(ours.placement, load, t.devices), tol);
  EXPECT_LE(ours.peak, baseline.peak + tol) << name;
  EXPECT_LE(uneven.peak, ours.peak + tol) << name;
  EXPECT_GE(ours.peak, peakLowerBound(load, t, false) - tol) << name;
  EXPECT_GE(uneven.peak, peakLowerBound(load, t, true) - tol) << name;
}

TEST(EPLBPlanner, PropertiesOnRandomInstances) {
  std::mt19937_64 rng(2024);
  const Case cases[] = {
      {8, 4, 3, 1, 1},    {12, 4, 4, 1, 1},  {16, 8, 2, 1, 1},
      {16, 4, 5, 1, 1},   {10, 10, 1, 1, 1}, {24, 8, 4, 2, 4},
      {32, 8, 5, 2, 8},   {64, 16, 5, 1, 1}, {64, 40, 2, 1, 1},
      {256, 32, 9, 1, 1}, {256, 32, 9, 4, 8}};
  for (const Case &c : cases)
    for (int trial = 0; trial < 4; ++trial) {
      Topology t{c.devices * c.perDevice, c.devices, c.nodes, c.groups};
      ASSERT_EQ(checkTopology(t, c.experts), "");
      std::string name = std::to_string(c.experts) + " experts on " +
                         std::to_string(c.devices) + "x" +
                         std::to_string(c.perDevice) + ", trial " +
                         std::to_string(trial);
      checkProperties(randomLoad(rng, c.experts), t, name);
    }
}

TEST(EPLBPlanner, AllZeroAndUniformLoads) {
  Topology t{16, 4, 1, 1};
  checkProperties(std::vector<double>(12, 0.0), t, "zeros");
  LayerPlan uniform = planLayer(std::vector<double>(16, 5.0), t, PlanOptions());
  EXPECT_DOUBLE_EQ(uniform.ratio(), 1.0);
  EXPECT_TRUE(uniform.optimal);
}

TEST(EPLBPlanner, TopologyErrorsNameTheOption) {
  EXPECT_EQ(checkTopology({6, 2, 1, 1}, 8),
            "--slots (6) must be at least the number of experts (8)");
  EXPECT_EQ(checkTopology({10, 4, 1, 1}, 8),
            "--slots (10) must be a multiple of --devices (4)");
  EXPECT_EQ(checkTopology({16, 8, 3, 1}, 8),
            "--nodes (3) must be positive and divide --devices (8)");
  EXPECT_EQ(checkTopology({16, 8, 1, 3}, 8),
            "--groups (3) must be positive, at most 1024, and divide the "
            "number of experts (8)");
  EXPECT_EQ(checkTopology({16, 1, 1, 1}, 8),
            "--slots / --devices (16) exceeds the number of experts (8): a "
            "device cannot hold two replicas of one expert");
}
} // namespace
