//===- EPLBHardeningTest.cpp - Hostile inputs and the time bound ----------===//
//
// Regression tests of issue 9 (hardening), one per defect, named after it,
// and the planner's time bound on a layer of 4,096 experts.
//
//===----------------------------------------------------------------------===//
#include "moe/EPLB/LocalSearch.h"
#include "moe/EPLB/PlanIO.h"
#include "moe/EPLB/Planner.h"
#include "moe/EPLB/Redeploy.h"
#include "moe/EPLB/Robust.h"
#include "moe/Support/Limits.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <numeric>
#include <random>
#include <string>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

namespace {
std::string traceError(const std::string &json) {
  llvm::Expected<LoadTrace> trace = parseLoadTrace(json);
  if (trace)
    return "";
  return llvm::toString(trace.takeError());
}

std::string placementError(const std::string &json, int64_t experts,
                           const Topology &t) {
  llvm::Expected<std::vector<Placement>> p = parsePlacements(json, experts, t);
  if (p)
    return "";
  return llvm::toString(p.takeError());
}

/// Plans `load` every way and checks that every number is finite and every
/// plan follows its rules.
void expectFinitePlans(const std::vector<double> &load, const Topology &t) {
  int64_t experts = static_cast<int64_t>(load.size());
  PlanOptions deepseek, even, shares;
  deepseek.algorithm = Algorithm::DeepSeek;
  shares.shares = true;
  for (const PlanOptions &options : {deepseek, even, shares}) {
    LayerPlan plan = planLayer(load, t, options);
    EXPECT_EQ(checkPlacement(plan.placement, experts, t,
                             options.algorithm == Algorithm::DeepSeek),
              "");
    EXPECT_TRUE(std::isfinite(plan.peak));
    EXPECT_TRUE(std::isfinite(plan.ratio()));
    EXPECT_TRUE(std::isfinite(peakOverAverage(plan.placement, load, t.devices)));
    EXPECT_EQ(firstNonFinite(
                  llvm::json::Value(placementJSON(plan.placement, load, t.devices))),
              "");
    RedeployDecision d = decideRedeploy(plan.placement, load, t, even, 0.05);
    EXPECT_TRUE(std::isfinite(d.gain()));
  }
  EXPECT_TRUE(std::isfinite(ratioToMean(peakLowerBound(load, t, false),
                                        std::accumulate(load.begin(),
                                                        load.end(), 0.0),
                                        t.devices)));
}

// Defect 1: loads near 1.7e308 overflowed sums to inf and NaN, which broke
// the sorts' ordering (heap corruption). Such loads are now an error naming
// the JSON path; the largest accepted load, 2^53, plans with finite numbers.
TEST(EPLBHardening, HeapCorruptionWithHugeLoads) {
  EXPECT_EQ(traceError("[[1.7e308, 1.7e308, 1, 2]]"),
            "$[0][0]: expected a finite load in [0, 2^53], got "
            "1.6999999999999999e+308");
  EXPECT_EQ(traceError("{\"logical_count\": [[1, 1e999]]}"),
            "$.logical_count[0][1]: expected a finite load in [0, 2^53], got "
            "inf");
  EXPECT_EQ(checkLoads({1, 2, kMaxLoad * 2}, "$[4]"),
            "$[4][2]: expected a finite load in [0, 2^53], got "
            "18014398509481984.000000");
  EXPECT_EQ(checkLoads({kMaxLoad, 0}), "");
  expectFinitePlans({kMaxLoad, kMaxLoad, 1, 2}, {4, 2, 1, 1});
  expectFinitePlans({kMaxLoad, kMaxLoad, kMaxLoad, kMaxLoad, kMaxLoad, 0, 0, 0},
                    {16, 8, 1, 1});
}

// Defect 1 (options): --robust-k NaN or inf made NaN loads. The tool rejects
// them (lit); the library's mean + k std stays finite for the largest k.
TEST(EPLBHardening, HeapCorruptionWithNonFiniteRobustK) {
  std::vector<std::vector<double>> windows = {{kMaxLoad, 0, 1, 2},
                                              {0, kMaxLoad, 2, 1}};
  std::vector<double> load = robustLoad(windows, Robust::MeanStd, 100);
  for (double w : load)
    EXPECT_TRUE(std::isfinite(w));
  LayerPlan plan =
      planWindows(windows, {4, 2, 1, 1}, PlanOptions(), Robust::MeanStd, 100);
  EXPECT_EQ(checkPlacement(plan.placement, 4, {4, 2, 1, 1}), "");
  EXPECT_TRUE(std::isfinite(plan.ratio()));
}

// Defect 2: huge sizes aborted with std::length_error or bad_alloc. Every
// size is checked against its limit before anything is allocated for it.
TEST(EPLBHardening, HugeSizesAreErrorsNotAborts) {
  EXPECT_EQ(checkTopology({int64_t(1) << 60, 2, 1, 1}, 4),
            "--slots must be a positive number of physical expert slots, at "
            "most 1048576; got 1152921504606846976");
  EXPECT_EQ(checkTopology({8, int64_t(1) << 40, 1, 1}, 4),
            "--devices must be a positive number of devices, at most 65536; "
            "got 1099511627776");
  EXPECT_EQ(checkTopology({8, 2, 1, 2048}, 2048),
            "--slots (8) must be at least the number of experts (2048)");
  EXPECT_EQ(checkTopology({4096, 2, 1, 2048}, 4096),
            "--groups (2048) must be positive, at most 1024, and divide the "
            "number of experts (4096)");
  EXPECT_EQ(checkTopology({8, 2, 1, 1}, limits::kMaxExperts + 1),
            "the load has 1048577 experts, more than the limit 1048576");
  // 2^16 + 1 layers of one expert.
  std::string layers = "[";
  for (int64_t l = 0; l <= limits::kMaxLayers; ++l)
    layers += l ? ",[1]" : "[1]";
  layers += "]";
  EXPECT_EQ(traceError(layers), "$: 65537 layers, more than the limit 65536");
  // 2^20 + 1 experts in a layer.
  std::string experts = "[[0";
  for (int64_t e = 0; e < limits::kMaxExperts; ++e)
    experts += ",0";
  experts += "]]";
  EXPECT_EQ(traceError(experts),
            "$[0]: 1048577 expert loads, more than the limit 1048576");
  // A placement of a huge cluster is checked before it is read.
  EXPECT_EQ(placementError("{\"phy2log\": [[0]]}", 4,
                           {int64_t(1) << 40, int64_t(1) << 20, 1, 1}),
            "--slots must be a positive number of physical expert slots, at "
            "most 1048576; got 1099511627776");
}

// Defect 3: deeply nested JSON overflowed the stack in both readers.
TEST(EPLBHardening, DeepNestingIsAnError) {
  std::string deep(100000, '[');
  EXPECT_EQ(traceError(deep),
            "not valid JSON: JSON nests deeper than 64 levels (at byte 64)");
  EXPECT_EQ(placementError("{\"phy2log\": " + deep, 4, {8, 2, 1, 1}),
            "not valid JSON: JSON nests deeper than 64 levels (at byte 75)");
}

// Defect 4: node-aware with fewer experts per node than slots per device
// stored expert -1 (no candidate fitted) and indexed with it. It is now a
// topology error naming the options.
TEST(EPLBHardening, NodeAwareWithoutFittingCandidate) {
  EXPECT_EQ(checkTopology({4, 2, 2, 2}, 2),
            "--slots / --devices (2) exceeds the experts per node (1 = 2 "
            "experts / 2 --nodes): node-aware placement keeps a group's "
            "experts on one node and a device cannot hold two replicas of one "
            "expert");
  // One fewer slot per device fits and plans.
  Topology t{4, 4, 2, 2};
  ASSERT_EQ(checkTopology(t, 2), "");
  expectFinitePlans({0.5, 0}, t);
}

// Defect 5: loads near 1.7e308 wrote inf and nan into the JSON plan. Loads
// are bounded (above) and ratios divide by the total when the mean of tiny
// loads underflows, so every number is finite.
TEST(EPLBHardening, OutputIsAlwaysFiniteJSON) {
  EXPECT_EQ(ratioToMean(5e-324, 5e-324, 2), 2);
  EXPECT_EQ(ratioToMean(0, 5e-324, 4), 1);
  EXPECT_EQ(ratioToMean(0, 0, 2), 1);
  expectFinitePlans({5e-324, 0, 0, 0}, {4, 2, 1, 1});
  expectFinitePlans({5e-324, 1e-310, DBL_MIN, 0}, {8, 4, 1, 1});
  expectFinitePlans({0, 0, 0, 0}, {8, 4, 1, 1});
  expectFinitePlans({kMaxLoad, 5e-324, 0, 1}, {8, 4, 1, 1});
}

// Defect 6 is the tool's option checks (lit: test/Tools/moe-eplb.test,
// "OPTIONS"). Hostile placements for the placement reader:
TEST(EPLBHardening, MismatchedPlacementsAreErrors) {
  Topology t{8, 4, 1, 1};
  EXPECT_EQ(placementError("{\"phy2log\": [[0, 1, 2, 3, 0, 1, 2, 9.3e18]]}",
                           4, t),
            "$.phy2log[0][7]: expected an expert id in [0, 4), got 9.3e+18");
  EXPECT_EQ(placementError("{\"phy2log\": [[0, 1, 2, 3, 0, 1, 2, -1]]}", 4, t),
            "$.phy2log[0][7]: expected an expert id in [0, 4), got -1");
  EXPECT_EQ(placementError("{\"phy2log\": [[0, 1, 2, 3, 0, 1, 2, 1.5]]}", 4,
                           t),
            "$.phy2log[0][7]: expected an expert id in [0, 4), got 1.5");
  EXPECT_EQ(placementError("{\"phy2log\": [[0, 1, 2, 3]]}", 4, t),
            "$.phy2log[0]: expected an array of 8 expert ids (--slots), got 4 ids");
  EXPECT_EQ(placementError("{\"devices\": 2, \"phy2log\": [[0, 1, 2, 3, 0, 1, 2, 3]]}", 4, t),
            "$.devices: the placement is for 2 devices, --devices is 4");
  EXPECT_EQ(
      placementError("{\"layers\": [{\"layer\": 3, \"phy2log\": [0, 1, 2, 3, 0, 1, 2, 3]}]}", 4, t),
      "$.layers[0].layer: expected 0 (the layers in order, as moe-eplb writes them), got 3");
  EXPECT_EQ(placementError("{\"layers\": [{\"phy2log\": [0, 1, 2, 3, 0, 1, 2, 3], "
                           "\"replica_count\": [2, 2, 2, 1]}]}",
                           4, t),
            "$.layers[0].replica_count: does not count each expert's slots in phy2log");
  EXPECT_EQ(placementError("{\"layers\": [7]}", 4, t),
            "$.layers[0]: expected an object with \"phy2log\", got 7");
  EXPECT_EQ(placementError("{\"layers\": [{\"phy2log\": [0, 1, 2, 3, 0, 1, "
                           "2, 3], \"share\": [1, 1, 1, 1, 0, 0, 0, 2]}]}",
                           4, t),
            "$.layers[0].share[7]: expected a share in [0, 1], got 2");
  EXPECT_EQ(placementError("{\"layers\": [{\"phy2log\": [0, 1, 2, 3, 0, 1, "
                           "2, 3], \"share\": [1, 1, 1, 1, 1, 0, 0, 0]}]}",
                           4, t),
            "$.layers[0].phy2log: the shares of expert 0 sum to 2.000000, "
            "not 1");
  EXPECT_EQ(placementError("{\"phy2log\": [[0, 1, 2, 3, 0, 1, 2, 3]]}", 5, t),
            "$.phy2log[0]: expert 4 has no replica");
}

// Empty arrays, strings, negative and non-number loads, wrong shapes.
TEST(EPLBHardening, HostileTracesAreErrors) {
  EXPECT_EQ(traceError("[]"),
            "$: expected a non-empty array of layers, got []");
  EXPECT_EQ(traceError("[[]]"), "$[0]: expected at least one expert");
  EXPECT_EQ(traceError("[[[]]]"), "$[0][0]: expected at least one expert");
  EXPECT_EQ(traceError("\"x\""),
            "$: expected a non-empty array of layers, got \"x\"");
  EXPECT_EQ(traceError("[[\"1\"]]"),
            "$[0][0]: expected a number, got \"1\"");
  EXPECT_EQ(traceError("[[null]]"), "$[0][0]: expected a number, got null");
  EXPECT_EQ(traceError("[[-0.5]]"),
            "$[0][0]: expected a finite load in [0, 2^53], got -0.5");
  EXPECT_EQ(traceError("[[[1, 2]], [1, 2]]"),
            "$[1][0]: expected an array of expert loads, got 1");
  EXPECT_NE(traceError("[[NaN]]"), "");
  EXPECT_NE(traceError(""), "");
}

/// Zipf-like loads with a few zeros, shuffled.
std::vector<double> randomLoad(uint64_t seed, int64_t experts) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<double> load(experts);
  for (int64_t e = 0; e < experts; ++e)
    load[e] = unit(rng) < 0.05
                  ? 0
                  : std::round(1000 / std::pow(1 + e, 0.8) * (0.5 + unit(rng)));
  std::shuffle(load.begin(), load.end(), rng);
  return load;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||     \
    __has_feature(memory_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// Defect 7: run time grew as the cube of the experts (4,000 experts: 105
// s). A layer of 4,096 experts plans in under 1 s of CPU time (asserted in
// optimised builds without sanitizers), and the local search, the only part
// not near-linear, stays within its stated budget of elementary steps. The
// plans stay at or below DeepSeek's peak.
TEST(EPLBHardening, PlansA4096ExpertLayerUnderOneSecond) {
  struct Case {
    int64_t slots, devices, nodes, groups;
    bool shares;
  };
  const Case cases[] = {
      {4608, 64, 1, 1, false},  {4608, 64, 1, 1, true},
      {4608, 32, 1, 1, false},  {4608, 256, 1, 1, false},
      {6144, 64, 1, 1, false},  {8192, 4096, 1, 1, false},
      {4608, 64, 8, 64, false}, {4608, 64, 1, 64, false},
      {4608, 32, 1, 8, false},  {8192, 4096, 1, 64, false},
  };
  std::vector<double> load = randomLoad(4096, 4096);
  for (const Case &c : cases) {
    Topology t{c.slots, c.devices, c.nodes, c.groups};
    ASSERT_EQ(checkTopology(t, 4096), "");
    PlanOptions options;
    options.shares = c.shares;
    std::clock_t start = std::clock();
    LayerPlan plan = planLayer(load, t, options);
    double seconds = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
    std::string name = std::to_string(c.slots) + " slots on " +
                       std::to_string(c.devices) + " devices, " +
                       std::to_string(c.nodes) + " node(s)" +
                       (c.shares ? ", shares" : "");
    std::printf("[          ] 4096 experts, %s: %.3f s CPU, %lld local-search "
                "steps, peak/avg %.4f\n",
                name.c_str(), seconds, static_cast<long long>(plan.searchWork),
                plan.ratio());
    EXPECT_EQ(checkPlacement(plan.placement, 4096, t), "") << name;
    EXPECT_LE(plan.searchWork, options.searchWork * (c.shares ? 2 : 1))
        << name;
    LayerPlan baseline = planLayer(load, t, PlanOptions{Algorithm::DeepSeek});
    // With groups the future objective's expected-peak search may take the
    // sample peak up to its slack above the bound, past DeepSeek's when
    // that is closer (144 slots per device: 1.00008 of the bound).
    double bound = peakLowerBound(load, t, c.shares);
    double slack = c.groups > 1 && c.nodes == 1 ? 2 * FutureOptions().slack : 0.0;
    EXPECT_LE(plan.peak, std::max(baseline.peak * (1 + 1e-9), bound * (1 + slack))) << name;
#ifdef NDEBUG
    if (!kSanitized) {
      EXPECT_LT(seconds, 1.0) << name;
    }
#endif
  }
}
} // namespace
