//===- Redeploy.cpp - Decide whether a new placement pays off -------------===//
#include "moe/EPLB/Redeploy.h"
#include "moe/EPLB/Assignment.h"
#include "moe/EPLB/LocalSearch.h"
#include "moe/EPLB/ShareFlow.h"

#include <algorithm>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

int64_t eplb::movedReplicas(const Placement &from, const Placement &to) {
  int64_t moved = 0;
  for (size_t s = 0; s < from.phy2log.size(); ++s)
    moved += from.phy2log[s] != to.phy2log[s];
  return moved;
}

namespace {
using Slots = std::vector<int64_t>;

Slots deviceSlots(const Placement &p, int64_t d, int64_t perDevice) {
  return Slots(p.phy2log.begin() + d * perDevice,
               p.phy2log.begin() + (d + 1) * perDevice);
}

/// Replicas two devices have in common.
int64_t overlap(Slots a, Slots b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  Slots common;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(),
                        std::back_inserter(common));
  return static_cast<int64_t>(common.size());
}

/// Best matching of the devices [newFirst, +count) of the proposal to
/// [oldFirst, +count) of the current placement: proposal device of each
/// current device, and the number of replicas kept.
std::pair<std::vector<int64_t>, int64_t>
matchDevices(const Placement &proposed, const Placement &current,
             int64_t newFirst, int64_t oldFirst, int64_t count,
             int64_t perDevice) {
  std::vector<std::vector<double>> cost(count, std::vector<double>(count));
  for (int64_t o = 0; o < count; ++o)
    for (int64_t n = 0; n < count; ++n)
      cost[o][n] = -static_cast<double>(
          overlap(deviceSlots(current, oldFirst + o, perDevice),
                  deviceSlots(proposed, newFirst + n, perDevice)));
  std::vector<int64_t> pick = minCostAssignment(cost);
  int64_t kept = 0;
  for (int64_t o = 0; o < count; ++o)
    kept -= static_cast<int64_t>(cost[o][pick[o]]);
  return {pick, kept};
}
} // namespace

Placement eplb::alignToCurrent(const Placement &proposed,
                               const Placement &current, const Topology &t) {
  int64_t perDevice = t.slotsPerDevice();
  int64_t blocks = t.hierarchical() ? t.nodes : 1;
  int64_t perBlock = t.devices / blocks;
  // Match whole nodes first (by the replicas their best device matching
  // keeps), then devices inside each matched pair of nodes.
  std::vector<std::vector<double>> cost(blocks, std::vector<double>(blocks));
  for (int64_t o = 0; o < blocks; ++o)
    for (int64_t n = 0; n < blocks; ++n)
      cost[o][n] =
          -static_cast<double>(matchDevices(proposed, current, n * perBlock,
                                            o * perBlock, perBlock, perDevice)
                                   .second);
  std::vector<int64_t> blockOf = minCostAssignment(cost);

  Placement out;
  out.phy2log.resize(proposed.phy2log.size());
  out.share.resize(proposed.share.size());
  for (int64_t o = 0; o < blocks; ++o) {
    std::vector<int64_t> deviceOf =
        matchDevices(proposed, current, blockOf[o] * perBlock, o * perBlock,
                     perBlock, perDevice)
            .first;
    for (int64_t k = 0; k < perBlock; ++k) {
      int64_t oldDevice = o * perBlock + k;
      int64_t newDevice = blockOf[o] * perBlock + deviceOf[k];
      // Replicas the current device already holds keep their slot.
      Slots old = deviceSlots(current, oldDevice, perDevice);
      std::vector<char> taken(perDevice, 0), placed(perDevice, 0);
      for (int64_t j = 0; j < perDevice; ++j) {
        int64_t src = newDevice * perDevice + j;
        for (int64_t i = 0; i < perDevice; ++i)
          if (!taken[i] && old[i] == proposed.phy2log[src]) {
            taken[i] = placed[j] = 1;
            out.phy2log[oldDevice * perDevice + i] = proposed.phy2log[src];
            out.share[oldDevice * perDevice + i] = proposed.share[src];
            break;
          }
      }
      int64_t free = 0;
      for (int64_t j = 0; j < perDevice; ++j) {
        if (placed[j])
          continue;
        while (taken[free])
          ++free;
        taken[free] = 1;
        int64_t src = newDevice * perDevice + j;
        out.phy2log[oldDevice * perDevice + free] = proposed.phy2log[src];
        out.share[oldDevice * perDevice + free] = proposed.share[src];
      }
    }
  }
  return out;
}

RedeployDecision eplb::decideRedeploy(const Placement &current,
                                      const std::vector<double> &load,
                                      const Topology &t,
                                      const PlanOptions &options,
                                      double threshold) {
  int64_t experts = static_cast<int64_t>(load.size());
  struct Candidate {
    Placement placement;
    double ratio;
    int64_t moves;
  };
  std::vector<Candidate> candidates;
  auto add = [&](Placement p) {
    double ratio = peakOverAverage(p, load, t.devices);
    int64_t moves = movedReplicas(current, p);
    candidates.push_back({std::move(p), ratio, moves});
  };
  add(alignToCurrent(planLayer(load, t, options).placement, current, t));
  bool valid = checkPlacement(current, experts, t) == "";
  if (valid && options.algorithm == Algorithm::Ours) {
    if (options.shares) {
      Placement reweighted = current;
      optimizeShares(reweighted, load, t.devices);
      add(std::move(reweighted));
    }
    if (!t.hierarchical()) {
      Placement even = current;
      setEvenShares(even, experts);
      Placement improved =
          improveEven({load, t.devices, t.slotsPerDevice()}, even);
      if (options.shares)
        optimizeShares(improved, load, t.devices);
      add(std::move(improved));
    }
  }

  double best = candidates[0].ratio;
  for (const Candidate &c : candidates)
    best = std::min(best, c.ratio);
  size_t pick = 0;
  for (size_t c = 0; c < candidates.size(); ++c)
    if (candidates[c].ratio <= best + threshold / 4 &&
        (candidates[pick].ratio > best + threshold / 4 ||
         candidates[c].moves < candidates[pick].moves))
      pick = c;

  RedeployDecision decision;
  decision.currentRatio = peakOverAverage(current, load, t.devices);
  decision.plannedRatio = candidates[pick].ratio;
  decision.redeploy = decision.gain() >= threshold;
  decision.movedReplicas = decision.redeploy ? candidates[pick].moves : 0;
  decision.placement =
      decision.redeploy ? std::move(candidates[pick].placement) : current;
  return decision;
}
