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
#include "moe/EPLB/FuturePacking.h"
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
std::optional<Placement> ringPlacement(const Problem &pr, int64_t workBudget,
                                       int64_t *workDone) {
  if (pr.perDevice < 2 || pr.slots() - pr.devices < pr.experts())
    return std::nullopt;
  Problem inner{pr.load, pr.devices, pr.perDevice - 1};
  std::optional<Placement> packed =
      bisectTarget(inner, std::numeric_limits<double>::infinity());
  if (!packed)
    return std::nullopt;
  Placement base =
      improveEven(inner, *packed, 0, 100000, workBudget, workDone);
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
  std::vector<char> isMine(pr.experts(), 0);
  for (int64_t d = 0; d < pr.devices; ++d) {
    std::vector<int64_t> mine = devicesExperts(d);
    std::vector<int64_t> next = devicesExperts((d + 1) % pr.devices);
    for (int64_t e : mine)
      isMine[e] = 1;
    int64_t link = -1;
    for (int64_t e : next)
      if (!isMine[e] && (link < 0 || piece(e) > piece(link)))
        link = e;
    // At most perDevice - 1 experts are mine: this stops within perDevice.
    for (int64_t e = 0; link < 0 && e < pr.experts(); ++e)
      if (!isMine[e])
        link = e;
    for (int64_t e : mine)
      isMine[e] = 0;
    ring.phy2log.insert(ring.phy2log.end(), mine.begin(), mine.end());
    ring.phy2log.push_back(link);
  }
  setEvenShares(ring, pr.experts());
  return ring;
}

/// Devices the exact searches branch over at most: a search node costs
/// O(devices).
constexpr int64_t kExactMaxDevices = 64;

bool smallEnough(const Problem &pr, const PlanOptions &options) {
  return options.exactBudget > 0 && pr.experts() <= options.exactMaxExperts &&
         pr.devices <= kExactMaxDevices;
}
} // namespace

LayerPlan eplb::planFlat(const Problem &pr, const Placement *start,
                         const PlanOptions &options) {
  LayerPlan plan;
  plan.mean = pr.total() / static_cast<double>(pr.devices);
  if (options.objective == Objective::Future && !options.shares) {
    FutureOptions future = options.future;
    future.workBudget = options.searchWork;
    std::optional<Placement> p = planForFuture(pr, future, &plan.searchWork);
    if (p && valid(pr, *p)) {
      plan.placement = std::move(*p);
      plan.peak = peakLoad(plan.placement, pr.load, pr.devices);
      double bound = evenLowerBound(pr);
      plan.optimal = plan.peak <= bound * (1 + 1e-9);
      double limit = plan.peak / (1 + options.futureSampleCost);
      // Only a plan below `limit` on the sample replaces it, and only on a
      // layer of the exact search's size: on the SGLang layers (256 experts)
      // at 2 slots per device fitted plans lost out of sample (EP144: +0.01%
      // against DeepSeek's, +0.00% without them).
      bool small = pr.experts() <= options.exactMaxExperts && pr.devices <= kExactMaxDevices;
      if (limit <= bound || !small)
        return plan;
      PlanOptions sample = options;
      sample.objective = Objective::Sample;
      LayerPlan fitted = planFlat(pr, start, sample);
      fitted.searchWork += plan.searchWork;
      if (fitted.peak < limit)
        return fitted;
      plan.searchWork = fitted.searchWork;
      // As good on the sample as a plan proven optimal there.
      plan.optimal |= fitted.optimal && plan.peak <= fitted.peak * (1 + 1e-9);
      return plan;
    }
  }
  double inf = std::numeric_limits<double>::infinity();
  std::optional<Placement> best;
  double bestPeak = inf;
  // With shares, every even candidate gets its optimal shares: one with a
  // higher even peak may still flow better.
  std::vector<Placement> others;
  auto consider = [&](std::optional<Placement> p) {
    if (!p || !valid(pr, *p))
      return;
    double peak = peakLoad(*p, pr.load, pr.devices);
    if (peak < bestPeak) {
      bestPeak = peak;
      if (best && options.shares)
        others.push_back(std::move(*best));
      best = std::move(p);
    } else if (options.shares) {
      others.push_back(std::move(*p));
    }
  };
  // Closer than this to the lower bound is not worth more search time.
  double bound = evenLowerBound(pr);
  double goodEnough = bound * (1 + 1e-6);
  // The local searches share one work budget.
  int64_t work = 0;
  auto improve = [&](Placement p) {
    return improveEven(pr, std::move(p), goodEnough, 100000,
                       std::max<int64_t>(0, options.searchWork - work), &work);
  };
  if (start && valid(pr, *start)) {
    consider(*start);
  } else if (start) {
    // Two ways to make DeepSeek's placement follow the rule; the local
    // search starts from the one with the lower peak first.
    Placement swapped = separateBySwaps(pr, *start);
    Placement replaced = separateDuplicates(pr, *start);
    if (peakLoad(replaced, pr.load, pr.devices) <
        peakLoad(swapped, pr.load, pr.devices))
      std::swap(swapped, replaced);
    consider(improve(std::move(swapped)));
    consider(improve(std::move(replaced)));
  }
  consider(bisectTarget(pr, bestPeak));
  if (!best)
    consider(separateDuplicates(
        pr,
        deepseekPlacement(pr.load, Topology{pr.slots(), pr.devices, 1, 1})));
  consider(improve(*best));
  if (pr.perDevice == 2) {
    std::vector<int64_t> counts =
        improvePairCounts(pr, replicaCounts(*best, pr.experts()));
    consider(improve(pairPlacement(pr, counts)));
  }

  plan.optimal = bestPeak <= bound * (1 + 1e-9);
  if (!plan.optimal && smallEnough(pr, options)) {
    ExactResult exact = exactEven(pr, bestPeak, options.exactBudget);
    consider(exact.placement);
    plan.optimal = exact.complete;
  }
  plan.searchWork = work;
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
  for (Placement &p : others)
    if (bestPeak > plan.mean * (1 + 1e-9))
      considerShares(std::move(p));
  if (bestPeak > plan.mean * (1 + 1e-9)) {
    // DeepSeek may stack replicas of an expert on one device; as one
    // replica with their summed share it fits the rules, and the freed slots
    // take any expert (share 0 or more), so this is never worse than it.
    if (start)
      considerShares(separateDuplicates(pr, *start));
    int64_t ringWork = 0;
    considerShares(ringPlacement(pr, options.searchWork, &ringWork));
    plan.searchWork += ringWork;
  }
  plan.optimal = bestPeak <= plan.mean * (1 + 1e-9);
  if (!plan.optimal && smallEnough(pr, options)) {
    ExactResult exact = exactShares(pr, bestPeak, options.exactBudget);
    considerShares(exact.placement);
    plan.optimal = exact.complete;
  }
  plan.placement = std::move(*best);
  plan.peak = options.minShare > 0
                  ? floorShares(plan.placement, pr.load, pr.devices,
                                options.minShare)
                  : bestPeak;
  plan.optimal &= plan.peak <= bestPeak * (1 + 1e-9);
  return plan;
}
