//===- ShareFlow.cpp - Best token shares for a fixed placement ------------===//
#include "moe/EPLB/ShareFlow.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

namespace {
constexpr int64_t kMaxFlowRounds = 256;

/// Dinic's max flow on real capacities.
class MaxFlow {
public:
  explicit MaxFlow(int64_t nodes)
      : adjacency(nodes), level(nodes), next(nodes) {}

  int64_t addEdge(int64_t from, int64_t to, double capacity) {
    adjacency[from].push_back(edges.size());
    edges.push_back({to, capacity});
    adjacency[to].push_back(edges.size());
    edges.push_back({from, 0.0});
    return static_cast<int64_t>(edges.size()) - 2;
  }
  void setCapacity(int64_t edge, double capacity) {
    edges[edge].capacity = capacity;
  }
  /// Restores every edge to its capacity before any flow was pushed.
  void reset() {
    for (size_t e = 0; e < edges.size(); e += 2) {
      edges[e].capacity += edges[e + 1].capacity;
      edges[e + 1].capacity = 0;
    }
  }
  double flowOn(int64_t edge) const { return edges[edge + 1].capacity; }

  double run(int64_t source, int64_t sink, double eps) {
    this->eps = eps;
    double total = 0;
    while (bfs(source, sink)) {
      std::fill(next.begin(), next.end(), 0);
      while (double pushed = dfs(source, sink, kInf))
        total += pushed;
    }
    return total;
  }
  /// Nodes reachable from `source` in the residual graph after run().
  std::vector<char> reachable(int64_t source) {
    bfs(source, -1);
    std::vector<char> seen(level.size());
    for (size_t v = 0; v < level.size(); ++v)
      seen[v] = level[v] >= 0;
    return seen;
  }

private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  struct Edge {
    int64_t to;
    double capacity;
  };
  bool bfs(int64_t source, int64_t sink) {
    std::fill(level.begin(), level.end(), -1);
    std::vector<int64_t> queue = {source};
    level[source] = 0;
    for (size_t head = 0; head < queue.size(); ++head)
      for (size_t e : adjacency[queue[head]])
        if (edges[e].capacity > eps && level[edges[e].to] < 0) {
          level[edges[e].to] = level[queue[head]] + 1;
          queue.push_back(edges[e].to);
        }
    return sink >= 0 && level[sink] >= 0;
  }
  double dfs(int64_t v, int64_t sink, double limit) {
    if (v == sink)
      return limit;
    for (size_t &i = next[v]; i < adjacency[v].size(); ++i) {
      Edge &e = edges[adjacency[v][i]];
      if (e.capacity <= eps || level[e.to] != level[v] + 1)
        continue;
      if (double pushed = dfs(e.to, sink, std::min(limit, e.capacity))) {
        e.capacity -= pushed;
        edges[adjacency[v][i] ^ 1].capacity += pushed;
        return pushed;
      }
    }
    return 0;
  }
  std::vector<Edge> edges;
  std::vector<std::vector<size_t>> adjacency;
  std::vector<int64_t> level;
  std::vector<size_t> next;
  double eps = 0;
};
} // namespace

double
eplb::minPeakWithShares(const std::vector<double> &load,
                        const std::vector<std::vector<int64_t>> &devicesOf,
                        int64_t devices,
                        std::vector<std::vector<double>> *tokens,
                        const std::vector<double> *fixed) {
  int64_t experts = static_cast<int64_t>(load.size());
  double total = 0;
  for (double w : load)
    total += w;
  auto fixedOn = [&](int64_t d) { return fixed ? (*fixed)[d] : 0.0; };
  double fixedTotal = 0, fixedMax = 0;
  for (int64_t d = 0; d < devices; ++d) {
    fixedTotal += fixedOn(d);
    fixedMax = std::max(fixedMax, fixedOn(d));
  }
  if (tokens) {
    tokens->resize(experts);
    for (int64_t e = 0; e < experts; ++e)
      (*tokens)[e].assign(devicesOf[e].size(), 0.0);
  }
  if (total <= 0)
    return fixedMax;

  // Nodes: source, experts, devices, sink.
  int64_t source = 0, sink = 1 + experts + devices;
  MaxFlow flow(sink + 1);
  for (int64_t e = 0; e < experts; ++e)
    flow.addEdge(source, 1 + e, load[e]);
  std::vector<std::vector<int64_t>> replicaEdge(experts);
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t d : devicesOf[e])
      replicaEdge[e].push_back(flow.addEdge(
          1 + e, 1 + experts + d, std::numeric_limits<double>::infinity()));
  std::vector<int64_t> deviceEdge(devices);
  double target =
      std::max((total + fixedTotal) / static_cast<double>(devices), fixedMax);
  for (int64_t d = 0; d < devices; ++d)
    deviceEdge[d] = flow.addEdge(1 + experts + d, sink, target - fixedOn(d));

  double eps = total * 1e-13;
  // Dinkelbach's method takes a handful of max flows (at most 9 on the real
  // traces); the cap bounds the time. Past it the shares are valid but may
  // miss the optimum.
  for (int64_t iteration = 0; iteration < kMaxFlowRounds; ++iteration) {
    flow.reset();
    for (int64_t d = 0; d < devices; ++d)
      flow.setCapacity(deviceEdge[d], std::max(0.0, target - fixedOn(d)));
    if (flow.run(source, sink, eps) >= total * (1 - 1e-12))
      break;
    // The experts still reachable from the source form the tightest set X;
    // the devices they reach are all saturated. Raise the target to its ratio.
    std::vector<char> seen = flow.reachable(source);
    double setLoad = 0;
    int64_t setDevices = 0;
    for (int64_t e = 0; e < experts; ++e)
      if (seen[1 + e])
        setLoad += load[e];
    for (int64_t d = 0; d < devices; ++d)
      if (seen[1 + experts + d]) {
        ++setDevices;
        setLoad += fixedOn(d);
      }
    double ratio =
        setDevices ? setLoad / static_cast<double>(setDevices) : target * 2;
    target = std::max(ratio, target * (1 + 1e-12));
  }
  if (tokens)
    for (int64_t e = 0; e < experts; ++e)
      for (size_t k = 0; k < replicaEdge[e].size(); ++k)
        (*tokens)[e][k] = flow.flowOn(replicaEdge[e][k]);
  return target;
}

double eplb::floorShares(Placement &p, const std::vector<double> &load,
                         int64_t devices, double floor) {
  int64_t experts = static_cast<int64_t>(load.size());
  int64_t slots = static_cast<int64_t>(p.phy2log.size());
  int64_t perDevice = slots / devices;
  std::vector<int64_t> count = replicaCounts(p, experts);
  std::vector<std::vector<int64_t>> devicesOf(experts), slotOf(experts);
  for (int64_t s = 0; s < slots; ++s) {
    devicesOf[p.phy2log[s]].push_back(s / perDevice);
    slotOf[p.phy2log[s]].push_back(s);
  }
  // Each replica's floor is routed first (a fixed load on its device); the
  // flow spreads the rest.
  std::vector<double> rest(experts), fixed(devices, 0.0);
  for (int64_t e = 0; e < experts; ++e) {
    double each = floor * load[e] / static_cast<double>(count[e]);
    rest[e] = load[e] - each * static_cast<double>(count[e]);
    for (int64_t d : devicesOf[e])
      fixed[d] += each;
  }
  std::vector<std::vector<double>> tokens;
  minPeakWithShares(rest, devicesOf, devices, &tokens, &fixed);
  setEvenShares(p, experts);
  for (int64_t e = 0; e < experts; ++e) {
    double each = floor * load[e] / static_cast<double>(count[e]);
    // Normalised by what was routed: with huge or tiny loads the flow's
    // sums may miss the load by rounding.
    double routed = 0;
    for (double t : tokens[e])
      routed += each + t;
    if (routed > 0 && std::isfinite(routed))
      for (size_t k = 0; k < slotOf[e].size(); ++k)
        p.share[slotOf[e][k]] = (each + tokens[e][k]) / routed;
  }
  return peakLoad(p, load, devices);
}

double eplb::optimizeShares(Placement &p, const std::vector<double> &load,
                            int64_t devices) {
  return floorShares(p, load, devices, 0.0);
}
