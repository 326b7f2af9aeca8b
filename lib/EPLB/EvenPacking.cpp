//===- EvenPacking.cpp - Replica counts and packing for a target peak -----===//
#include "moe/EPLB/EvenPacking.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

double eplb::evenLowerBound(const Problem &pr) {
  double bound = pr.total() / static_cast<double>(pr.devices);
  // Giving each extra slot to the largest piece minimises the largest piece.
  using Entry = std::pair<double, int64_t>;
  std::priority_queue<Entry> heap;
  std::vector<int64_t> count(pr.experts(), 1);
  for (int64_t e = 0; e < pr.experts(); ++e)
    heap.push({pr.load[e], e});
  for (int64_t extra = pr.slots() - pr.experts(); extra > 0 && !heap.empty();
       --extra) {
    int64_t e = heap.top().second;
    heap.pop();
    if (++count[e] < pr.devices)
      heap.push({pr.load[e] / static_cast<double>(count[e]), e});
    else
      bound = std::max(bound, pr.load[e] / static_cast<double>(count[e]));
  }
  if (!heap.empty())
    bound = std::max(bound, heap.top().first);
  return bound;
}

namespace {
/// The packer's state: per device its load and experts.
struct Packing {
  Packing(const Problem &pr)
      : pr(pr), load(pr.devices, 0.0), experts(pr.devices),
        onDevice(pr.devices * pr.experts(), 0), devicesOf(pr.experts()) {}

  bool has(int64_t d, int64_t e) const {
    return onDevice[d * pr.experts() + e];
  }
  int64_t freeSlots(int64_t d) const {
    return pr.perDevice - static_cast<int64_t>(experts[d].size());
  }
  void place(int64_t d, int64_t e, double piece) {
    load[d] += piece;
    experts[d].push_back(e);
    onDevice[d * pr.experts() + e] = 1;
    devicesOf[e].push_back(d);
  }
  /// Adds one more replica of `e` on `d`, re-splitting its load evenly.
  void addReplica(int64_t d, int64_t e) {
    double r = static_cast<double>(devicesOf[e].size());
    double drop = pr.load[e] / r - pr.load[e] / (r + 1);
    for (int64_t other : devicesOf[e])
      load[other] -= drop;
    place(d, e, pr.load[e] / (r + 1));
  }
  Placement toPlacement() const {
    Placement p;
    p.phy2log.reserve(pr.slots());
    for (const std::vector<int64_t> &list : experts)
      p.phy2log.insert(p.phy2log.end(), list.begin(), list.end());
    setEvenShares(p, pr.experts());
    return p;
  }

  const Problem &pr;
  std::vector<double> load;
  std::vector<std::vector<int64_t>> experts;
  std::vector<char> onDevice;
  std::vector<std::vector<int64_t>> devicesOf;
};

/// Fills the free slots: each takes a replica of the expert with the largest
/// load per replica (as DeepSeek would) among those not on the device whose
/// new piece keeps the device within the target; else the smallest piece.
void fillFreeSlots(Packing &pk, double target) {
  const Problem &pr = pk.pr;
  std::vector<int64_t> devices(pr.devices);
  std::iota(devices.begin(), devices.end(), 0);
  std::stable_sort(devices.begin(), devices.end(), [&](int64_t a, int64_t b) {
    return pk.load[a] < pk.load[b];
  });
  for (int64_t d : devices) {
    while (pk.freeSlots(d) > 0) {
      int64_t best = -1, smallest = -1;
      double bestPerReplica = -1, smallestPiece = 0;
      for (int64_t e = 0; e < pr.experts(); ++e) {
        if (pk.has(d, e) ||
            static_cast<int64_t>(pk.devicesOf[e].size()) >= pr.devices)
          continue;
        double piece =
            pr.load[e] / static_cast<double>(pk.devicesOf[e].size() + 1);
        if (smallest < 0 || piece < smallestPiece) {
          smallest = e;
          smallestPiece = piece;
        }
        if (pk.load[d] + piece > target)
          continue;
        double perReplica =
            pr.load[e] / static_cast<double>(pk.devicesOf[e].size());
        if (perReplica > bestPerReplica) {
          best = e;
          bestPerReplica = perReplica;
        }
      }
      pk.addReplica(d, best >= 0 ? best : smallest);
    }
  }
}
} // namespace

std::optional<Placement> eplb::packAtTarget(const Problem &pr, double target,
                                            FitRule rule) {
  int64_t experts = pr.experts();
  std::vector<int64_t> order(experts);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return pr.load[a] > pr.load[b];
  });
  double limit = target * (1 + 1e-9);
  std::vector<int64_t> needAfter(experts + 1, 0);
  for (int64_t i = experts - 1; i >= 0; --i) {
    double need = target > 0 ? std::ceil(pr.load[order[i]] / limit) : 1;
    needAfter[i] = needAfter[i + 1] + std::max<int64_t>(1, need);
  }

  Packing pk(pr);
  int64_t free = pr.slots();
  std::vector<int64_t> candidates;
  for (int64_t i = 0; i < experts; ++i) {
    int64_t e = order[i];
    int64_t minR = needAfter[i] - needAfter[i + 1];
    int64_t maxR = std::min(pr.devices, free - needAfter[i + 1]);
    bool placed = false;
    for (int64_t r = minR; r <= maxR && !placed; ++r) {
      double piece = pr.load[e] / static_cast<double>(r);
      candidates.clear();
      for (int64_t d = 0; d < pr.devices; ++d)
        if (pk.freeSlots(d) > 0 && pk.load[d] + piece <= limit)
          candidates.push_back(d);
      if (static_cast<int64_t>(candidates.size()) < r)
        continue;
      auto fuller = [&](int64_t a, int64_t b) {
        return rule == FitRule::Best ? pk.load[a] > pk.load[b]
                                     : pk.load[a] < pk.load[b];
      };
      std::partial_sort(candidates.begin(), candidates.begin() + r,
                        candidates.end(), fuller);
      for (int64_t k = 0; k < r; ++k)
        pk.place(candidates[k], e, piece);
      free -= r;
      placed = true;
    }
    if (!placed)
      return std::nullopt;
  }
  fillFreeSlots(pk, target);
  return pk.toPlacement();
}

std::optional<Placement> eplb::bisectTarget(const Problem &pr, double upper,
                                            int iterations) {
  double lo = evenLowerBound(pr), hi = upper;
  std::optional<Placement> best;
  double bestPeak = upper;
  // Tries `target` with both rules; true when one meets it.
  auto meets = [&](double target) {
    bool met = false;
    for (FitRule rule : {FitRule::Best, FitRule::Worst}) {
      std::optional<Placement> p = packAtTarget(pr, target, rule);
      if (!p)
        continue;
      double peak = peakLoad(*p, pr.load, pr.devices);
      if (!best || peak < bestPeak) {
        bestPeak = peak;
        best = std::move(p);
      }
      met |= peak <= target * (1 + 1e-9);
    }
    return met;
  };
  if (meets(lo))
    return best;
  if (!std::isfinite(hi)) {
    // No bound to start from: double the target until the packer meets it.
    for (hi = std::max(lo, 1e-300) * 2; !meets(hi) && std::isfinite(hi);
         hi *= 2)
      lo = hi;
    if (!best)
      return std::nullopt;
    hi = std::min(hi, bestPeak);
  }
  for (int it = 0; it < iterations && hi - lo > 1e-7 * hi; ++it) {
    double mid = 0.5 * (lo + hi);
    if (meets(mid))
      hi = std::min(mid, bestPeak);
    else
      lo = mid;
  }
  if (best && bestPeak >= upper)
    return std::nullopt;
  return best;
}
