//===- EPLBFuturePackingTest.cpp - Even placements for the next traffic ---===//
#include "moe/EPLB/EvenPacking.h"
#include "moe/EPLB/FuturePacking.h"
#include "moe/EPLB/Planner.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

using namespace mlir::moe::eplb;

namespace {
/// A DeepSeek-V3-like layer: 256 experts, Zipf(0.8) popularity times
/// lognormal noise, shuffled.
std::vector<double> skewedLoad(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> noise(0.0, 0.4);
  std::vector<double> load(256);
  for (size_t e = 0; e < load.size(); ++e)
    load[e] = std::round(1e5 / std::pow(1.0 + e, 0.8) * noise(rng));
  std::shuffle(load.begin(), load.end(), rng);
  return load;
}

const Topology kEP32{288, 32, 1, 1};

TEST(EPLBFuturePacking, ReplicasGoToTheHottestExperts) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    std::vector<double> load = skewedLoad(seed);
    LayerPlan plan = planLayer(load, kEP32, PlanOptions());
    ASSERT_EQ(checkPlacement(plan.placement, 256, kEP32), "");
    std::vector<int64_t> count = replicaCounts(plan.placement, 256);
    double mean = std::accumulate(load.begin(), load.end(), 0.0) / 256;
    double coldestReplicated = INFINITY, hottestSingle = 0;
    for (int64_t e = 0; e < 256; ++e) {
      if (count[e] > 1)
        coldestReplicated = std::min(coldestReplicated, load[e]);
      else
        hottestSingle = std::max(hottestSingle, load[e]);
      // No replica is spent on an expert below the mean.
      EXPECT_TRUE(count[e] == 1 || load[e] >= mean) << "seed " << seed << " expert " << e;
    }
    EXPECT_GE(coldestReplicated, hottestSingle) << "seed " << seed;
  }
}

TEST(EPLBFuturePacking, StaysWithinTheSlackOfTheBoundOnTheSample) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    std::vector<double> load = skewedLoad(seed);
    Problem pr{load, 32, 9};
    std::optional<Placement> p = planForFuture(pr, FutureOptions());
    ASSERT_TRUE(p);
    // The bound of the counts it chose: the mean and its largest piece.
    std::vector<int64_t> count = replicaCounts(*p, 256);
    double bound = pr.total() / 32;
    for (int64_t e = 0; e < 256; ++e)
      bound = std::max(bound, load[e] / static_cast<double>(count[e]));
    // The slack is a penalty, not a constraint: a swap search can stop a
    // little above it.
    EXPECT_LE(peakLoad(*p, load, 32), bound * (1 + 2 * FutureOptions().slack))
        << "seed " << seed;
    EXPECT_GE(peakLoad(*p, load, 32), evenLowerBound(pr) - 1e-9);
  }
}

TEST(EPLBFuturePacking, BothObjectivesStayCloseToTheBound) {
  // Different plans, both within a whisker of the bound on the sample.
  std::vector<double> load = skewedLoad(7);
  PlanOptions sample;
  sample.objective = Objective::Sample;
  LayerPlan fit = planLayer(load, kEP32, sample);
  LayerPlan future = planLayer(load, kEP32, PlanOptions());
  double bound = peakLowerBound(load, kEP32, false);
  EXPECT_LE(fit.peak, bound * (1 + 1e-4));
  EXPECT_LE(future.peak, bound * (1 + 2 * FutureOptions().slack));
  EXPECT_NE(fit.placement.phy2log, future.placement.phy2log);
}

TEST(EPLBFuturePacking, Deterministic) {
  std::vector<double> load = skewedLoad(3);
  Problem pr{load, 32, 9};
  std::optional<Placement> a = planForFuture(pr, FutureOptions());
  std::optional<Placement> b = planForFuture(pr, FutureOptions());
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->phy2log, b->phy2log);
}

TEST(EPLBFuturePacking, WorkBudgetStopsTheSwaps) {
  std::vector<double> load = skewedLoad(4);
  Problem pr{load, 32, 9};
  FutureOptions few;
  few.workBudget = 1;
  int64_t work = 0;
  std::optional<Placement> p = planForFuture(pr, few, &work);
  ASSERT_TRUE(p);
  EXPECT_EQ(checkPlacement(*p, 256, kEP32), "");
  // One round of candidates (9 pieces x 279 others) at most.
  EXPECT_LE(work, 9 * 288);
}

TEST(EPLBFuturePacking, ReplicaLoadChoosesTheCounts) {
  std::vector<double> load = skewedLoad(5);
  Problem pr{load, 32, 9};
  // Odd experts count 1.5 times their load.
  for (size_t e = 0; e < load.size(); ++e)
    pr.spread.replicaLoad.push_back(load[e] * (e % 2 ? 1.5 : 1.0));
  std::optional<Placement> p = planForFuture(pr, FutureOptions());
  ASSERT_TRUE(p);
  EXPECT_EQ(checkPlacement(*p, 256, kEP32), "");
  std::vector<int64_t> counts = waterFillingCounts({pr.spread.replicaLoad, 32, 9});
  EXPECT_NE(counts, waterFillingCounts(pr));
  EXPECT_EQ(replicaCounts(*p, 256), counts);
}

// Eight experts of one load on 4 devices x 2 slots: the heaviest-first
// packing puts experts d and d + 4 on device d. Where experts 0, 1, 4 and
// 5 vary (variance), devices 0 and 1 hold two varying experts each until
// the swaps give every device one.
TEST(EPLBFuturePacking, VarianceSpreadsVaryingExperts) {
  Problem pr{std::vector<double>(8, 100.0), 4, 2};
  auto varyingPerDevice = [](const Placement &p) {
    std::vector<int> out;
    for (size_t d = 0; d < 4; ++d) {
      int varying = 0;
      for (size_t s = 2 * d; s < 2 * d + 2; ++s)
        varying += p.phy2log[s] % 4 < 2;
      out.push_back(varying);
    }
    return out;
  };
  std::optional<Placement> plain = planForFuture(pr, FutureOptions());
  ASSERT_TRUE(plain);
  EXPECT_EQ(varyingPerDevice(*plain), (std::vector<int>{2, 2, 0, 0}));
  pr.spread.variance = {1e4, 1e4, 0, 0, 1e4, 1e4, 0, 0};
  std::optional<Placement> spread = planForFuture(pr, FutureOptions());
  ASSERT_TRUE(spread);
  EXPECT_EQ(varyingPerDevice(*spread), (std::vector<int>{1, 1, 1, 1}));
}
} // namespace
