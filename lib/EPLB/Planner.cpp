//===- Planner.cpp - Plan one layer's expert placement --------------------===//
#include "moe/EPLB/Planner.h"
#include "moe/EPLB/DeepSeek.h"
#include "moe/EPLB/EvenPacking.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

namespace {
/// Node of each group, packed heaviest first into the lightest node with room,
/// then improved by swapping groups between the heaviest node and another.
std::vector<int64_t> packGroups(const std::vector<double> &groupLoad,
                                int64_t nodes) {
  int64_t groups = static_cast<int64_t>(groupLoad.size());
  int64_t perNode = groups / nodes;
  std::vector<int64_t> order(groups), node(groups);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return groupLoad[a] > groupLoad[b];
  });
  std::vector<double> nodeLoad(nodes, 0.0);
  std::vector<int64_t> count(nodes, 0);
  for (int64_t g : order) {
    int64_t best = -1;
    for (int64_t n = 0; n < nodes; ++n)
      if (count[n] < perNode && (best < 0 || nodeLoad[n] < nodeLoad[best]))
        best = n;
    node[g] = best;
    nodeLoad[best] += groupLoad[g];
    ++count[best];
  }
  // Each swap lowers the heaviest node; rounds of O(perNode groups) each,
  // at most 2^24 steps in all.
  int64_t maxRounds = std::max<int64_t>(1, (int64_t(1) << 24) /
                                               std::max<int64_t>(
                                                   1, perNode * groups));
  int64_t rounds = 0;
  for (bool improved = true; improved && rounds < maxRounds; ++rounds) {
    improved = false;
    int64_t top =
        std::max_element(nodeLoad.begin(), nodeLoad.end()) - nodeLoad.begin();
    for (int64_t a = 0; a < groups && !improved; ++a) {
      if (node[a] != top)
        continue;
      for (int64_t b = 0; b < groups && !improved; ++b) {
        int64_t other = node[b];
        double moved = groupLoad[a] - groupLoad[b];
        if (other == top || moved <= 0 ||
            nodeLoad[other] + moved >= nodeLoad[top] * (1 - 1e-12))
          continue;
        nodeLoad[top] -= moved;
        nodeLoad[other] += moved;
        std::swap(node[a], node[b]);
        improved = true;
      }
    }
  }
  return node;
}

/// The number of splits of `groups` groups into `nodes` unlabelled sets of
/// equal size, groups! / ((groups/nodes)!^nodes nodes!), or infinity past
/// 2^60.
double splitCount(int64_t groups, int64_t nodes) {
  double logCount = std::lgamma(double(groups) + 1) -
                    double(nodes) * std::lgamma(double(groups / nodes) + 1) -
                    std::lgamma(double(nodes) + 1);
  return logCount > 60 * std::log(2.0)
             ? std::numeric_limits<double>::infinity()
             : std::exp(logCount);
}

/// Every split of the groups into equal-sized sets, one per node (node
/// labels do not matter), or none when there are more than `limit`
/// (counted first, so the enumeration costs O(limit groups nodes) at most).
std::vector<std::vector<int64_t>> allSplits(int64_t groups, int64_t nodes,
                                            size_t limit) {
  std::vector<std::vector<int64_t>> out;
  if (splitCount(groups, nodes) > static_cast<double>(limit) + 0.5)
    return out;
  std::vector<int64_t> node(groups, -1), count(nodes, 0);
  bool overflow = false;
  auto recurse = [&](auto &self, int64_t g, int64_t opened) -> void {
    if (overflow)
      return;
    if (g == groups) {
      if (out.size() >= limit) {
        overflow = true;
        return;
      }
      out.push_back(node);
      return;
    }
    for (int64_t n = 0; n < std::min(opened + 1, nodes); ++n) {
      if (count[n] == groups / nodes)
        continue;
      node[g] = n;
      ++count[n];
      self(self, g + 1, std::max(opened, n + 1));
      --count[n];
    }
  };
  recurse(recurse, 0, 0);
  if (overflow)
    out.clear();
  return out;
}

/// The loads of the experts of node `n` under `nodeOfGroup`, in id order.
std::vector<double> nodeLoads(const std::vector<double> &load,
                              const Topology &t,
                              const std::vector<int64_t> &nodeOfGroup,
                              int64_t n) {
  int64_t groupSize = static_cast<int64_t>(load.size()) / t.groups;
  std::vector<double> out;
  for (int64_t g = 0; g < t.groups; ++g)
    if (nodeOfGroup[g] == n)
      out.insert(out.end(), load.begin() + g * groupSize,
                 load.begin() + (g + 1) * groupSize);
  return out;
}

double flatBound(const std::vector<double> &load, int64_t devices,
                 int64_t perDevice, bool shares) {
  Problem pr{load, devices, perDevice};
  return shares ? pr.total() / static_cast<double>(devices)
                : evenLowerBound(pr);
}

/// The bound of one split: its worst node's.
double splitBound(const std::vector<double> &load, const Topology &t,
                  const std::vector<int64_t> &nodeOfGroup, bool shares) {
  double bound = 0;
  for (int64_t n = 0; n < t.nodes; ++n)
    bound = std::max(bound,
                     flatBound(nodeLoads(load, t, nodeOfGroup, n),
                               t.devicesPerNode(), t.slotsPerDevice(), shares));
  return bound;
}

/// Splits of the groups over the nodes tried at most: 5000, and fewer for
/// large layers so that bounding them all (O(E + groups nodes) each) stays
/// within about 2^24 steps.
size_t maxSplits(int64_t experts, const Topology &t) {
  int64_t each = experts + t.groups * t.nodes;
  return static_cast<size_t>(
      std::max<int64_t>(1, std::min<int64_t>(5000, (int64_t(1) << 24) / each)));
}

/// Ours per node for one assignment of groups to nodes. `start` is DeepSeek's
/// placement when the assignment is DeepSeek's (its node n holds exactly the
/// experts of node n), else null.
LayerPlan planNodes(const std::vector<double> &load, const Topology &t,
                    const std::vector<int64_t> &nodeOfGroup,
                    const Placement *start, const PlanOptions &options) {
  int64_t experts = static_cast<int64_t>(load.size());
  int64_t groupSize = experts / t.groups;
  int64_t slotsPerNode = t.slots / t.nodes;
  LayerPlan plan;
  plan.placement.phy2log.resize(t.slots);
  plan.placement.share.resize(t.slots);
  plan.optimal = true;
  // The nodes share the search budgets.
  PlanOptions perNode = options;
  perNode.searchWork = std::max<int64_t>(1, options.searchWork / t.nodes);
  perNode.exactBudget =
      options.exactBudget > 0
          ? std::max<int64_t>(1, options.exactBudget / t.nodes)
          : 0;
  // Each expert's index inside its node (one array for all nodes: a node's
  // slots hold only its own experts).
  std::vector<int64_t> local(experts, -1);
  for (int64_t n = 0; n < t.nodes; ++n) {
    std::vector<int64_t> members;
    for (int64_t g = 0; g < t.groups; ++g)
      if (nodeOfGroup[g] == n)
        for (int64_t j = 0; j < groupSize; ++j)
          members.push_back(g * groupSize + j);
    Problem sub{{}, t.devicesPerNode(), t.slotsPerDevice()};
    sub.groups = t.groups / t.nodes;
    for (size_t k = 0; k < members.size(); ++k) {
      local[members[k]] = static_cast<int64_t>(k);
      sub.load.push_back(load[members[k]]);
    }
    Placement subStart;
    bool useStart = start != nullptr;
    for (int64_t s = 0; useStart && s < slotsPerNode; ++s) {
      int64_t e = start->phy2log[n * slotsPerNode + s];
      useStart = nodeOfGroup[e / groupSize] == n;
      subStart.phy2log.push_back(local[e]);
    }
    if (useStart)
      setEvenShares(subStart, sub.experts());
    LayerPlan part = planFlat(sub, useStart ? &subStart : nullptr, perNode);
    for (int64_t s = 0; s < slotsPerNode; ++s) {
      plan.placement.phy2log[n * slotsPerNode + s] =
          members[part.placement.phy2log[s]];
      plan.placement.share[n * slotsPerNode + s] = part.placement.share[s];
    }
    plan.peak = std::max(plan.peak, part.peak);
    plan.optimal &= part.optimal;
    plan.searchWork += part.searchWork;
  }
  // Node-aware optimality holds only for the assignment tried.
  plan.optimal = false;
  return plan;
}
} // namespace

LayerPlan eplb::planLayer(const std::vector<double> &load, const Topology &t,
                          const PlanOptions &options, const LoadSpread &spread) {
  int64_t experts = static_cast<int64_t>(load.size());
  Placement baseline = deepseekPlacement(load, t);
  double total = std::accumulate(load.begin(), load.end(), 0.0);
  double mean = total / static_cast<double>(t.devices);
  if (options.algorithm == Algorithm::DeepSeek) {
    LayerPlan plan;
    plan.placement = std::move(baseline);
    plan.peak = peakLoad(plan.placement, load, t.devices);
    plan.mean = mean;
    return plan;
  }
  if (!t.hierarchical()) {
    Problem pr{load, t.devices, t.slotsPerDevice(), spread, t.groups};
    return planFlat(pr, &baseline, options);
  }

  int64_t groupSize = experts / t.groups;
  std::vector<double> groupLoad(t.groups, 0.0);
  std::vector<int64_t> deepseekNode(t.groups);
  for (int64_t g = 0; g < t.groups; ++g) {
    for (int64_t j = 0; j < groupSize; ++j)
      groupLoad[g] += load[g * groupSize + j];
  }
  // DeepSeek's node of a group: where its first expert landed.
  int64_t slotsPerNode = t.slots / t.nodes;
  for (int64_t s = 0; s < t.slots; ++s)
    deepseekNode[baseline.phy2log[s] / groupSize] = s / slotsPerNode;
  // Up to four splits are planned: each gets a quarter of the budgets.
  PlanOptions perSplit = options;
  perSplit.searchWork = std::max<int64_t>(1, options.searchWork / 4);
  perSplit.exactBudget =
      options.exactBudget > 0 ? std::max<int64_t>(1, options.exactBudget / 4)
                              : 0;
  LayerPlan best = planNodes(load, t, deepseekNode, &baseline, perSplit);
  // Our splits: the three with the best bounds when all can be tried, else
  // heaviest-first packing improved by swaps.
  std::vector<std::vector<int64_t>> splits =
      allSplits(t.groups, t.nodes, maxSplits(experts, t));
  std::vector<double> bounds;
  for (const std::vector<int64_t> &split : splits)
    bounds.push_back(splitBound(load, t, split, options.shares));
  std::vector<size_t> order(splits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return bounds[a] < bounds[b]; });
  std::vector<std::vector<int64_t>> tries;
  for (size_t k = 0; k < std::min<size_t>(3, order.size()); ++k)
    tries.push_back(splits[order[k]]);
  if (tries.empty())
    tries.push_back(packGroups(groupLoad, t.nodes));
  int64_t work = best.searchWork;
  for (const std::vector<int64_t> &split : tries) {
    LayerPlan other = planNodes(load, t, split, nullptr, perSplit);
    work += other.searchWork;
    if (other.peak < best.peak)
      best = std::move(other);
  }
  best.searchWork = work;
  best.mean = mean;
  return best;
}

double eplb::peakLowerBound(const std::vector<double> &load, const Topology &t,
                            bool shares) {
  double bound = flatBound(load, t.devices, t.slotsPerDevice(), shares);
  if (!t.hierarchical())
    return bound;
  std::vector<std::vector<int64_t>> splits = allSplits(
      t.groups, t.nodes, maxSplits(static_cast<int64_t>(load.size()), t));
  if (splits.empty())
    return bound;
  double best = std::numeric_limits<double>::infinity();
  for (const std::vector<int64_t> &split : splits)
    best = std::min(best, splitBound(load, t, split, shares));
  return std::max(bound, best);
}
