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

// Experts 0-3 are one group, 4-7 another, loads 100, 100, 1, 1 in each:
// the heaviest-first packing puts 0, 1, 4, 5 on devices 0-3 and then 2, 3,
// 6, 7 beside them, each beside an expert of its own group. Told the
// groups, the swaps of equal pieces give every device one expert of each
// group at the same loads.
TEST(EPLBFuturePacking, GroupsSpreadOverDevices) {
  Problem pr{{100, 100, 1, 1, 100, 100, 1, 1}, 4, 2};
  auto sameGroupDevices = [](const Placement &p) {
    int same = 0;
    for (size_t d = 0; d < 4; ++d)
      same += p.phy2log[2 * d] / 4 == p.phy2log[2 * d + 1] / 4;
    return same;
  };
  std::optional<Placement> plain = planForFuture(pr, FutureOptions());
  ASSERT_TRUE(plain);
  EXPECT_EQ(sameGroupDevices(*plain), 4);
  pr.groups = 2;
  std::optional<Placement> grouped = planForFuture(pr, FutureOptions());
  ASSERT_TRUE(grouped);
  EXPECT_EQ(checkPlacement(*grouped, 8, Topology{8, 4, 1, 2}), "");
  EXPECT_EQ(sameGroupDevices(*grouped), 0);
  EXPECT_EQ(peakLoad(*grouped, pr.load, 4), 101);
  // Without the correlation the groups change nothing.
  FutureOptions uncorrelated;
  uncorrelated.groupCorrelation = 0;
  std::optional<Placement> p = planForFuture(pr, uncorrelated);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->phy2log, plain->phy2log);
}

// With DeepSeek-V3's 8 groups (the expected-peak objective) the plan stays
// as close to the bound on the sample as without them, and a device holds
// fewer same-group pieces than the heaviest-first packing alone.
TEST(EPLBFuturePacking, GroupedPlansStayWithinTheSlack) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    std::vector<double> load = skewedLoad(seed);
    Problem pr{load, 32, 9};
    pr.groups = 8;
    std::optional<Placement> p = planForFuture(pr, FutureOptions());
    ASSERT_TRUE(p);
    ASSERT_EQ(checkPlacement(*p, 256, Topology{288, 32, 1, 8}), "");
    std::vector<int64_t> count = replicaCounts(*p, 256);
    double bound = pr.total() / 32;
    for (int64_t e = 0; e < 256; ++e)
      bound = std::max(bound, load[e] / static_cast<double>(count[e]));
    EXPECT_LE(peakLoad(*p, load, 32), bound * (1 + 2 * FutureOptions().slack)) << "seed " << seed;
    // Twice the products of same-group pieces, summed over the devices.
    auto cross = [&](const Placement &q) {
      double sum = 0;
      for (int64_t d = 0; d < 32; ++d)
        for (int64_t i = 9 * d; i < 9 * d + 9; ++i)
          for (int64_t j = 9 * d; j < i; ++j)
            if (q.phy2log[i] / 32 == q.phy2log[j] / 32)
              sum += 2 * load[q.phy2log[i]] / count[q.phy2log[i]] * load[q.phy2log[j]] /
                     count[q.phy2log[j]];
      return sum;
    };
    FutureOptions noSwaps;
    noSwaps.workBudget = 0;
    std::optional<Placement> packed = planForFuture(pr, noSwaps);
    ASSERT_TRUE(packed);
    EXPECT_LT(cross(*p), 0.5 * cross(*packed)) << "seed " << seed;
  }
}
