//===- BatchSelection.cpp - replicas chosen per batch ---------------------===//
#include "BatchSelection.h"

#include <algorithm>
#include <limits>

using namespace moert;

namespace {
/// Dinic's max flow on integer capacities. The compiler's ShareFlow.cpp has
/// one on doubles; the runtime builds without the compiler's libraries (on
/// machines without LLVM), and whole choices need integers.
class IntegerFlow {
public:
  explicit IntegerFlow(int nodes) : adjacency(nodes), level(nodes), next(nodes) {}

  int addEdge(int from, int to, int64_t capacity) {
    adjacency[from].push_back(int(edges.size()));
    edges.push_back({to, capacity, capacity});
    adjacency[to].push_back(int(edges.size()));
    edges.push_back({from, 0, 0});
    return int(edges.size()) - 2;
  }
  void setCapacity(int edge, int64_t capacity) { edges[edge].initial = capacity; }
  int64_t flowOn(int edge) const { return edges[edge ^ 1].capacity; }

  int64_t run(int source, int sink) {
    for (Edge &e : edges)
      e.capacity = e.initial;
    int64_t total = 0;
    while (layer(source, sink)) {
      std::fill(next.begin(), next.end(), 0);
      while (int64_t pushed = push(source, sink, kInf))
        total += pushed;
    }
    return total;
  }

private:
  static constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  struct Edge {
    int to;
    int64_t capacity, initial;
  };
  bool layer(int source, int sink) {
    std::fill(level.begin(), level.end(), -1);
    std::vector<int> queue = {source};
    level[source] = 0;
    for (size_t head = 0; head < queue.size(); ++head)
      for (int e : adjacency[queue[head]])
        if (edges[e].capacity > 0 && level[edges[e].to] < 0) {
          level[edges[e].to] = level[queue[head]] + 1;
          queue.push_back(edges[e].to);
        }
    return level[sink] >= 0;
  }
  int64_t push(int v, int sink, int64_t limit) {
    if (v == sink)
      return limit;
    for (size_t &i = next[v]; i < adjacency[v].size(); ++i) {
      Edge &e = edges[adjacency[v][i]];
      if (e.capacity <= 0 || level[e.to] != level[v] + 1)
        continue;
      if (int64_t pushed = push(e.to, sink, std::min(limit, e.capacity))) {
        e.capacity -= pushed;
        edges[adjacency[v][i] ^ 1].capacity += pushed;
        return pushed;
      }
    }
    return 0;
  }
  std::vector<Edge> edges;
  std::vector<std::vector<int>> adjacency;
  std::vector<int> level;
  std::vector<size_t> next;
};
} // namespace

BatchSelection moert::selectReplicas(const Placement &placement,
                                     const std::vector<int64_t> &expertChoices,
                                     int ranks) {
  const int64_t experts = placement.experts();
  const int64_t perRank = placement.slotsPerRank();
  BatchSelection out;
  out.slotChoices.assign(size_t(perRank * ranks), 0);
  std::vector<int64_t> fixed(ranks, 0);
  // The replicated experts with choices, and the first slot of each on
  // every rank that holds one.
  std::vector<int32_t> replicated;
  std::vector<std::vector<int32_t>> firstSlotOn;
  int64_t shared = 0;
  for (int32_t e = 0; e < experts; ++e) {
    const std::vector<int32_t> &slots = placement.slotsOf(e);
    if (slots.size() == 1 || expertChoices[e] == 0) {
      out.slotChoices[slots.front()] = expertChoices[e];
      fixed[slots.front() / perRank] += expertChoices[e];
      continue;
    }
    replicated.push_back(e);
    shared += expertChoices[e];
    firstSlotOn.emplace_back();
    std::vector<bool> seen(ranks, false);
    for (int32_t p : slots)
      if (!seen[p / perRank]) {
        seen[p / perRank] = true;
        firstSlotOn.back().push_back(p);
      }
  }
  const int64_t mostFixed = *std::max_element(fixed.begin(), fixed.end());
  int64_t total = shared;
  for (int64_t f : fixed)
    total += f;
  out.peak = std::max(mostFixed, total / ranks + (total % ranks != 0));
  if (replicated.empty())
    return out;

  // Nodes: source, replicated experts, ranks, sink.
  const int r = int(replicated.size()), source = 0, sink = 1 + r + ranks;
  IntegerFlow flow(sink + 1);
  std::vector<std::vector<int>> slotEdge(r);
  for (int i = 0; i < r; ++i) {
    flow.addEdge(source, 1 + i, expertChoices[replicated[i]]);
    for (int32_t p : firstSlotOn[i])
      slotEdge[i].push_back(flow.addEdge(1 + i, 1 + r + int(p / perRank), shared));
  }
  std::vector<int> rankEdge(ranks);
  for (int d = 0; d < ranks; ++d)
    rankEdge[d] = flow.addEdge(1 + r + d, sink, 0);
  auto feasible = [&](int64_t peak) {
    for (int d = 0; d < ranks; ++d)
      flow.setCapacity(rankEdge[d], peak - fixed[d]);
    return flow.run(source, sink) == shared;
  };
  // The least feasible peak: every choice of a replicated expert may land
  // on the least loaded rank, so mostFixed + shared always is.
  int64_t low = out.peak, high = mostFixed + shared;
  while (low < high) {
    int64_t middle = low + (high - low) / 2;
    if (feasible(middle))
      high = middle;
    else
      low = middle + 1;
  }
  feasible(low);
  out.peak = low;
  for (int i = 0; i < r; ++i)
    for (size_t k = 0; k < firstSlotOn[i].size(); ++k)
      out.slotChoices[firstSlotOn[i][k]] = flow.flowOn(slotEdge[i][k]);
  return out;
}

SlotCursor::SlotCursor(const Placement &placement, const BatchSelection &selection,
                       const std::vector<int64_t> &before)
    : placement(placement), selection(selection),
      replica(size_t(placement.experts()), 0), left(size_t(placement.experts()), 0) {
  for (int32_t e = 0; e < placement.experts(); ++e) {
    const std::vector<int32_t> &slots = placement.slotsOf(e);
    int64_t skip = before[e];
    size_t k = 0;
    while (k + 1 < slots.size() && selection.slotChoices[slots[k]] <= skip)
      skip -= selection.slotChoices[slots[k++]];
    replica[e] = k;
    left[e] = selection.slotChoices[slots[k]] - skip;
  }
}

int32_t SlotCursor::next(int32_t expert) {
  const std::vector<int32_t> &slots = placement.slotsOf(expert);
  size_t &k = replica[expert];
  while (left[expert] <= 0 && k + 1 < slots.size())
    left[expert] = selection.slotChoices[slots[++k]];
  --left[expert];
  return slots[k];
}
