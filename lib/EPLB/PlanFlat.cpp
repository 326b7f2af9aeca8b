//===- PlanFlat.cpp - Our balancer on devices without nodes ---------------===//
//
// Even shares: bisection on the target peak with the joint packer, local
// search, and branch and bound when the instance is small. Uneven shares:
// the best of several placements with optimal shares from a max flow,
// including a ring that links every device to the next through one replica
// so that load can flow around it; branch and bound when small.
//
//===----------------------------------------------------------------------===//
#include "moe/EPLB/DeepSeek.h"
#include "moe/EPLB/EvenPacking.h"
#include "moe/EPLB/ExactSearch.h"
#include "moe/EPLB/LocalSearch.h"
#include "moe/EPLB/Pairing.h"
#include "moe/EPLB/Planner.h"
#include "moe/EPLB/ShareFlow.h"

#include <algorithm>
#include <limits>
#include <optional>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

namespace {
bool valid(const Problem &pr, const Placement &p) {
  return checkPlacement(p, pr.experts(),
                        Topology{pr.slots(), pr.devices, 1, 1}) == "";
}

/// Devices of `perDevice - 1` replicas packed by the even planner, plus one
/// slot per device holding the heaviest piece of the next device's experts.
std::optional<Placement> ringPlacement(const Problem &pr) {
  if (pr.perDevice < 2 || pr.slots() - pr.devices < pr.experts())
    return std::nullopt;
  Problem inner{pr.load, pr.devices, pr.perDevice - 1};
  std::optional<Placement> packed =
      bisectTarget(inner, std::numeric_limits<double>::infinity());
  if (!packed)
    return std::nullopt;
  Placement base = improveEven(inner, *packed);
  std::vector<int64_t> count = replicaCounts(base, pr.experts());
  auto piece = [&](int64_t e) {
    return pr.load[e] / static_cast<double>(count[e]);
  };
  auto devicesExperts = [&](int64_t d) {
    return std::vector<int64_t>(base.phy2log.begin() + d * inner.perDevice,
                                base.phy2log.begin() +
                                    (d + 1) * inner.perDevice);
  };
  Placement ring;
  for (int64_t d = 0; d < pr.devices; ++d) {
    std::vector<int64_t> mine = devicesExperts(d);
    std::vector<int64_t> next = devicesExperts((d + 1) % pr.devices);
    auto isMine = [&](int64_t e) {
      return std::find(mine.begin(), mine.end(), e) != mine.end();
    };
    int64_t link = -1;
    for (int64_t e : next)
      if (!isMine(e) && (link < 0 || piece(e) > piece(link)))
        link = e;
    for (int64_t e = 0; link < 0 && e < pr.experts(); ++e)
      if (!isMine(e))
        link = e;
    ring.phy2log.insert(ring.phy2log.end(), mine.begin(), mine.end());
    ring.phy2log.push_back(link);
  }
  setEvenShares(ring, pr.experts());
  return ring;
}

bool smallEnough(const Problem &pr, const PlanOptions &options) {
  return options.exactBudget > 0 && pr.experts() <= options.exactMaxExperts;
}
} // namespace

LayerPlan eplb::planFlat(const Problem &pr, const Placement *start,
                         const PlanOptions &options) {
  LayerPlan plan;
  plan.mean = pr.total() / static_cast<double>(pr.devices);
  double inf = std::numeric_limits<double>::infinity();
  std::optional<Placement> best;
  double bestPeak = inf;
  auto consider = [&](std::optional<Placement> p) {
    if (!p)
      return;
    double peak = peakLoad(*p, pr.load, pr.devices);
    if (peak < bestPeak) {
      bestPeak = peak;
      best = std::move(p);
    }
  };
  // Closer than this to the lower bound is not worth more search time.
  double bound = evenLowerBound(pr);
  double goodEnough = bound * (1 + 1e-6);
  if (start && valid(pr, *start))
    consider(*start);
  else if (start)
    consider(improveEven(pr, separateDuplicates(pr, *start), goodEnough));
  consider(bisectTarget(pr, bestPeak));
  if (!best)
    consider(separateDuplicates(
        pr,
        deepseekPlacement(pr.load, Topology{pr.slots(), pr.devices, 1, 1})));
  consider(improveEven(pr, *best, goodEnough));
  if (pr.perDevice == 2) {
    std::vector<int64_t> counts =
        improvePairCounts(pr, replicaCounts(*best, pr.experts()));
    consider(improveEven(pr, pairPlacement(pr, counts), goodEnough));
  }

  plan.optimal = bestPeak <= bound * (1 + 1e-9);
  if (!plan.optimal && smallEnough(pr, options)) {
    ExactResult exact = exactEven(pr, bestPeak, options.exactBudget);
    consider(exact.placement);
    plan.optimal = exact.complete;
  }
  if (!options.shares) {
    plan.placement = std::move(*best);
    plan.peak = bestPeak;
    return plan;
  }

  std::optional<Placement> evenBest = best;
  bestPeak = inf;
  best.reset();
  auto considerShares = [&](std::optional<Placement> p) {
    if (!p || !valid(pr, *p))
      return;
    double peak = optimizeShares(*p, pr.load, pr.devices);
    if (peak < bestPeak) {
      bestPeak = peak;
      best = std::move(p);
    }
  };
  considerShares(evenBest);
  if (bestPeak > plan.mean * (1 + 1e-9)) {
    // DeepSeek may stack replicas of an expert on one device; as one
    // replica with their summed share it fits the rules, and the freed slots
    // take any expert (share 0 or more), so this is never worse than it.
    if (start)
      considerShares(separateDuplicates(pr, *start));
    considerShares(ringPlacement(pr));
  }
  plan.optimal = bestPeak <= plan.mean * (1 + 1e-9);
  if (!plan.optimal && smallEnough(pr, options)) {
    ExactResult exact = exactShares(pr, bestPeak, options.exactBudget);
    considerShares(exact.placement);
    plan.optimal = exact.complete;
  }
  plan.placement = std::move(*best);
  plan.peak = bestPeak;
  return plan;
}
