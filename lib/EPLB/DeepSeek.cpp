//===- DeepSeek.cpp - DeepSeek's EPLB, the baseline balancer --------------===//
#include "moe/EPLB/DeepSeek.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <queue>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

void eplb::balancedPacking(const std::vector<float> &weight, int64_t packs,
                           std::vector<int64_t> &packIndex,
                           std::vector<int64_t> &rankInPack) {
  int64_t n = static_cast<int64_t>(weight.size());
  int64_t perPack = n / packs;
  packIndex.assign(n, 0);
  rankInPack.assign(n, 0);
  // The callers pack a multiple of `packs` items; anything else is not
  // packed (every item in pack 0).
  if (packs <= 0 || n % packs != 0)
    return;
  if (perPack == 1) {
    std::iota(packIndex.begin(), packIndex.end(), 0);
    return;
  }
  // torch.sort on the CPU is stable: equal weights keep their index order.
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return weight[a] > weight[b]; });
  // The packs with room in a heap, lightest first and the first index among
  // equally light ones (what a linear scan for the strict minimum picks):
  // O(n log packs) instead of O(n packs).
  using Entry = std::pair<float, int64_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> open;
  for (int64_t p = 0; p < packs; ++p)
    open.push({0.0f, p});
  std::vector<int64_t> packItems(packs, 0);
  for (int64_t item : order) {
    auto [packWeight, best] = open.top();
    open.pop();
    packIndex[item] = best;
    rankInPack[item] = packItems[best]++;
    if (packItems[best] < perPack)
      open.push({packWeight + weight[item], best});
  }
}

Replication eplb::replicateExperts(const std::vector<float> &weight,
                                   int64_t physical) {
  int64_t logical = static_cast<int64_t>(weight.size());
  Replication r;
  r.phy2log.resize(physical);
  r.rank.assign(physical, 0);
  r.count.assign(logical, 1);
  std::iota(r.phy2log.begin(), r.phy2log.begin() + logical, 0);
  // Highest load per replica first, the first index among equal ones (as
  // torch.argmax): a heap keyed by (value, -index), O(physical log logical).
  using Entry = std::pair<float, int64_t>;
  auto before = [](const Entry &a, const Entry &b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(before)> heap(before);
  for (int64_t e = 0; e < logical; ++e)
    heap.push({weight[e] / static_cast<float>(r.count[e]), e});
  for (int64_t i = logical; i < physical; ++i) {
    int64_t best = heap.top().second;
    heap.pop();
    r.phy2log[i] = best;
    r.rank[i] = r.count[best]++;
    heap.push({weight[best] / static_cast<float>(r.count[best]), best});
  }
  return r;
}

static std::vector<int64_t> inverse(const std::vector<int64_t> &perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

Placement eplb::deepseekPlacement(const std::vector<double> &load,
                                  const Topology &topology,
                                  std::vector<int64_t> *rankOut) {
  int64_t experts = static_cast<int64_t>(load.size());
  int64_t groups = topology.hierarchical() ? topology.groups : 1;
  int64_t nodes = topology.hierarchical() ? topology.nodes : 1;
  int64_t groupSize = experts / groups;
  int64_t groupsPerNode = groups / nodes;
  int64_t expertsPerNode = experts / nodes;
  int64_t slotsPerNode = topology.slots / nodes;
  int64_t devicesPerNode = topology.devices / nodes;
  int64_t perDevice = topology.slotsPerDevice();

  std::vector<float> weight(load.begin(), load.end());
  // Step 1: pack groups to nodes.
  std::vector<float> groupWeight(groups);
  for (int64_t g = 0; g < groups; ++g) {
    double sum = 0;
    for (int64_t j = 0; j < groupSize; ++j)
      sum += weight[g * groupSize + j];
    groupWeight[g] = static_cast<float>(sum);
  }
  std::vector<int64_t> groupPack, groupRank;
  balancedPacking(groupWeight, nodes, groupPack, groupRank);
  std::vector<int64_t> log2mlog(experts);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j < groupSize; ++j)
      log2mlog[g * groupSize + j] =
          (groupPack[g] * groupsPerNode + groupRank[g]) * groupSize + j;
  std::vector<int64_t> mlog2log = inverse(log2mlog);

  Placement placement;
  placement.phy2log.resize(topology.slots);
  std::vector<int64_t> rank(topology.slots);
  for (int64_t node = 0; node < nodes; ++node) {
    // Step 2: replicate within the node.
    std::vector<float> nodeWeight(expertsPerNode);
    for (int64_t k = 0; k < expertsPerNode; ++k)
      nodeWeight[k] = weight[mlog2log[node * expertsPerNode + k]];
    Replication rep = replicateExperts(nodeWeight, slotsPerNode);
    // Step 3: pack the node's replicas to its devices.
    std::vector<float> phyWeight(slotsPerNode);
    for (int64_t i = 0; i < slotsPerNode; ++i)
      phyWeight[i] = nodeWeight[rep.phy2log[i]] /
                     static_cast<float>(rep.count[rep.phy2log[i]]);
    std::vector<int64_t> pack, rankInPack;
    balancedPacking(phyWeight, devicesPerNode, pack, rankInPack);
    for (int64_t i = 0; i < slotsPerNode; ++i) {
      int64_t slot = node * slotsPerNode + pack[i] * perDevice + rankInPack[i];
      placement.phy2log[slot] =
          mlog2log[rep.phy2log[i] + node * expertsPerNode];
      rank[slot] = rep.rank[i];
    }
  }
  setEvenShares(placement, experts);
  if (rankOut)
    *rankOut = std::move(rank);
  return placement;
}
