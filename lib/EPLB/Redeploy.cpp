//===- Redeploy.cpp - Decide whether a new placement pays off -------------===//
#include "moe/EPLB/Redeploy.h"
#include "moe/EPLB/Assignment.h"
#include "moe/EPLB/LocalSearch.h"
#include "moe/EPLB/ShareFlow.h"

#include <algorithm>
#include <tuple>

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

/// Blocks of at most this many devices (or nodes) are matched exactly (the
/// Hungarian method, O(n^3) time and O(n^2) memory); larger ones greedily.
constexpr int64_t kMaxExactMatching = 256;
/// Experts with more replicas than this in a block do not steer the greedy
/// matching (they overlap with almost every device anyway).
constexpr int64_t kMaxGreedyReplicas = 64;

/// Greedy matching of the devices [newFirst, +count) of the proposal to
/// [oldFirst, +count) of the current placement: each current device in turn
/// takes the free proposed device sharing the most replicas with it, found
/// through the experts it holds. O(count S kMaxGreedyReplicas).
std::pair<std::vector<int64_t>, int64_t>
matchGreedy(const Placement &proposed, const Placement &current,
            int64_t newFirst, int64_t oldFirst, int64_t count,
            int64_t perDevice) {
  // The proposed devices of each expert, sorted by expert.
  std::vector<std::pair<int64_t, int64_t>> holders;
  holders.reserve(count * perDevice);
  for (int64_t n = 0; n < count; ++n)
    for (int64_t e : deviceSlots(proposed, newFirst + n, perDevice))
      holders.push_back({e, n});
  std::sort(holders.begin(), holders.end());
  std::vector<int64_t> pick(count, -1), tally(count, 0), touched;
  std::vector<char> used(count, 0);
  int64_t nextFree = 0, kept = 0;
  for (int64_t o = 0; o < count; ++o) {
    for (int64_t e : deviceSlots(current, oldFirst + o, perDevice)) {
      auto range = std::equal_range(
          holders.begin(), holders.end(), std::make_pair(e, int64_t(0)),
          [](const std::pair<int64_t, int64_t> &a,
             const std::pair<int64_t, int64_t> &b) { return a.first < b.first; });
      if (range.second - range.first > kMaxGreedyReplicas)
        continue;
      for (auto it = range.first; it != range.second; ++it)
        if (!used[it->second]) {
          if (tally[it->second]++ == 0)
            touched.push_back(it->second);
        }
    }
    int64_t best = -1;
    for (int64_t n : touched)
      if (best < 0 || tally[n] > tally[best] ||
          (tally[n] == tally[best] && n < best))
        best = n;
    if (best < 0) {
      while (used[nextFree])
        ++nextFree;
      best = nextFree;
    } else {
      kept += tally[best];
    }
    for (int64_t n : touched)
      tally[n] = 0;
    touched.clear();
    used[best] = 1;
    pick[o] = best;
  }
  return {pick, kept};
}

/// Best matching of the devices [newFirst, +count) of the proposal to
/// [oldFirst, +count) of the current placement: proposal device of each
/// current device, and the number of replicas kept.
std::pair<std::vector<int64_t>, int64_t>
matchDevices(const Placement &proposed, const Placement &current,
             int64_t newFirst, int64_t oldFirst, int64_t count,
             int64_t perDevice) {
  if (count > kMaxExactMatching)
    return matchGreedy(proposed, current, newFirst, oldFirst, count,
                       perDevice);
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

/// The proposed node of each current node. Exact (replicas kept by each
/// pair's best device matching, then the Hungarian method) while that
/// costs at most 2^24 steps; else by the replicas each pair of nodes has in
/// common, matched greedily or exactly as above.
std::vector<int64_t> matchNodes(const Placement &proposed,
                                const Placement &current, int64_t blocks,
                                int64_t perBlock, int64_t perDevice) {
  if (blocks == 1)
    return {0};
  std::vector<std::vector<double>> cost;
  bool exact = blocks <= kMaxExactMatching && perBlock <= kMaxExactMatching &&
               blocks * blocks * perBlock * perBlock * (perBlock + perDevice) <=
                   (int64_t(1) << 24);
  if (exact) {
    cost.assign(blocks, std::vector<double>(blocks));
    for (int64_t o = 0; o < blocks; ++o)
      for (int64_t n = 0; n < blocks; ++n)
        cost[o][n] = -static_cast<double>(
            matchDevices(proposed, current, n * perBlock, o * perBlock,
                         perBlock, perDevice)
                .second);
    return minCostAssignment(cost);
  }
  // Replicas per (node, expert), then per pair of nodes their overlap.
  int64_t slotsPerBlock = perBlock * perDevice;
  auto countsOf = [&](const Placement &p) {
    std::vector<std::pair<int64_t, int64_t>> keys; // (expert, node)
    keys.reserve(p.phy2log.size());
    for (size_t s = 0; s < p.phy2log.size(); ++s)
      keys.push_back({p.phy2log[s], static_cast<int64_t>(s) / slotsPerBlock});
    std::sort(keys.begin(), keys.end());
    return keys;
  };
  std::vector<std::pair<int64_t, int64_t>> oldKeys = countsOf(current),
                                           newKeys = countsOf(proposed);
  // Sparse pair overlaps: per expert, its old nodes times its new nodes.
  std::vector<std::tuple<int64_t, int64_t, int64_t>> pairs; // (o, n, common)
  size_t i = 0, j = 0;
  while (i < oldKeys.size() && j < newKeys.size()) {
    int64_t e = std::min(oldKeys[i].first, newKeys[j].first);
    size_t iEnd = i, jEnd = j;
    while (iEnd < oldKeys.size() && oldKeys[iEnd].first == e)
      ++iEnd;
    while (jEnd < newKeys.size() && newKeys[jEnd].first == e)
      ++jEnd;
    // Runs of (expert, node): count per node on both sides.
    std::vector<std::pair<int64_t, int64_t>> oldNodes, newNodes;
    for (size_t k = i; k < iEnd; ++k)
      if (oldNodes.empty() || oldNodes.back().first != oldKeys[k].second)
        oldNodes.push_back({oldKeys[k].second, 1});
      else
        ++oldNodes.back().second;
    for (size_t k = j; k < jEnd; ++k)
      if (newNodes.empty() || newNodes.back().first != newKeys[k].second)
        newNodes.push_back({newKeys[k].second, 1});
      else
        ++newNodes.back().second;
    if (static_cast<int64_t>(oldNodes.size() * newNodes.size()) <=
        kMaxGreedyReplicas * kMaxGreedyReplicas)
      for (auto [o, a] : oldNodes)
        for (auto [n, b] : newNodes)
          pairs.push_back({o, n, std::min(a, b)});
    i = iEnd;
    j = jEnd;
  }
  std::sort(pairs.begin(), pairs.end());
  // Merge equal (o, n).
  std::vector<std::tuple<int64_t, int64_t, int64_t>> merged;
  for (auto [o, n, c] : pairs)
    if (!merged.empty() && std::get<0>(merged.back()) == o &&
        std::get<1>(merged.back()) == n)
      std::get<2>(merged.back()) += c;
    else
      merged.push_back({o, n, c});
  if (blocks <= kMaxExactMatching) {
    cost.assign(blocks, std::vector<double>(blocks, 0.0));
    for (auto [o, n, c] : merged)
      cost[o][n] = -static_cast<double>(c);
    return minCostAssignment(cost);
  }
  // Greedy: the pairs with the most in common first.
  std::stable_sort(merged.begin(), merged.end(), [](const auto &a,
                                                    const auto &b) {
    return std::get<2>(a) > std::get<2>(b);
  });
  std::vector<int64_t> pick(blocks, -1);
  std::vector<char> taken(blocks, 0);
  for (auto [o, n, c] : merged)
    if (pick[o] < 0 && !taken[n]) {
      pick[o] = n;
      taken[n] = 1;
    }
  int64_t nextFree = 0;
  for (int64_t o = 0; o < blocks; ++o)
    if (pick[o] < 0) {
      while (taken[nextFree])
        ++nextFree;
      pick[o] = nextFree;
      taken[nextFree] = 1;
    }
  return pick;
}
} // namespace

Placement eplb::alignToCurrent(const Placement &proposed,
                               const Placement &current, const Topology &t) {
  int64_t perDevice = t.slotsPerDevice();
  int64_t blocks = t.hierarchical() ? t.nodes : 1;
  int64_t perBlock = t.devices / blocks;
  // Match whole nodes first, then devices inside each matched pair of nodes.
  std::vector<int64_t> blockOf =
      matchNodes(proposed, current, blocks, perBlock, perDevice);

  Placement out;
  out.phy2log.resize(proposed.phy2log.size());
  out.share.resize(proposed.share.size());
  // Per current device: its (expert, slot) sorted, to find where a replica
  // it already holds sits in O(log S).
  std::vector<std::pair<int64_t, int64_t>> old(perDevice);
  std::vector<char> taken(perDevice), placed(perDevice);
  for (int64_t o = 0; o < blocks; ++o) {
    std::vector<int64_t> deviceOf =
        matchDevices(proposed, current, blockOf[o] * perBlock, o * perBlock,
                     perBlock, perDevice)
            .first;
    for (int64_t k = 0; k < perBlock; ++k) {
      int64_t oldDevice = o * perBlock + k;
      int64_t newDevice = blockOf[o] * perBlock + deviceOf[k];
      // Replicas the current device already holds keep their slot.
      for (int64_t i = 0; i < perDevice; ++i)
        old[i] = {current.phy2log[oldDevice * perDevice + i], i};
      std::sort(old.begin(), old.end());
      std::fill(taken.begin(), taken.end(), 0);
      std::fill(placed.begin(), placed.end(), 0);
      for (int64_t j = 0; j < perDevice; ++j) {
        int64_t src = newDevice * perDevice + j;
        int64_t e = proposed.phy2log[src];
        for (auto it = std::lower_bound(old.begin(), old.end(),
                                        std::make_pair(e, int64_t(0)));
             it != old.end() && it->first == e; ++it) {
          int64_t i = it->second;
          if (taken[i])
            continue;
          taken[i] = placed[j] = 1;
          out.phy2log[oldDevice * perDevice + i] = e;
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
    // Shares as planLayer sets them: every replica at least minShare of an
    // even share.
    if (options.shares) {
      Placement reweighted = current;
      floorShares(reweighted, load, t.devices, options.minShare);
      add(std::move(reweighted));
    }
    if (!t.hierarchical()) {
      Placement even = current;
      setEvenShares(even, experts);
      Placement improved =
          improveEven({load, t.devices, t.slotsPerDevice()}, even);
      if (options.shares)
        floorShares(improved, load, t.devices, options.minShare);
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
