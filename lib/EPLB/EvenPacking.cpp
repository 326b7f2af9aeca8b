//===- EvenPacking.cpp - Replica counts and packing for a target peak -----===//
#include "moe/EPLB/EvenPacking.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <set>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

std::vector<int64_t> eplb::waterFillingCounts(const Problem &pr) {
  std::vector<int64_t> count(pr.experts(), 1);
  using Entry = std::pair<double, int64_t>; // (load per replica, -expert)
  std::priority_queue<Entry> heap;
  for (int64_t e = 0; e < pr.experts(); ++e)
    if (pr.devices > 1)
      heap.push({pr.load[e], -e});
  for (int64_t extra = pr.slots() - pr.experts(); extra > 0 && !heap.empty();
       --extra) {
    int64_t e = -heap.top().second;
    heap.pop();
    if (++count[e] < pr.devices)
      heap.push({pr.load[e] / static_cast<double>(count[e]), -e});
  }
  return count;
}

double eplb::evenLowerBound(const Problem &pr) {
  double bound = pr.total() / static_cast<double>(pr.devices);
  // Giving each extra slot to the largest piece minimises the largest piece.
  std::vector<int64_t> count = waterFillingCounts(pr);
  for (int64_t e = 0; e < pr.experts(); ++e)
    bound = std::max(bound, pr.load[e] / static_cast<double>(count[e]));
  return bound;
}

namespace {
/// Devices with a free slot ordered by (load, index).
using OpenDevices = std::set<std::pair<double, int64_t>>;

/// The packer's state: per device its load and experts, and each expert's
/// replica count.
struct Packing {
  Packing(const Problem &pr)
      : pr(pr), load(pr.devices, 0.0), experts(pr.devices),
        count(pr.experts(), 0) {
    for (int64_t d = 0; d < pr.devices; ++d)
      open.insert({0.0, d});
  }

  int64_t freeSlots(int64_t d) const {
    return pr.perDevice - static_cast<int64_t>(experts[d].size());
  }
  /// Puts a replica of `e` taking `piece` on `d` (in `open`).
  void place(int64_t d, int64_t e, double piece) {
    open.erase({load[d], d});
    load[d] += piece;
    experts[d].push_back(e);
    ++count[e];
    if (freeSlots(d) > 0)
      open.insert({load[d], d});
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
  std::vector<int64_t> count;
  OpenDevices open;
};

/// Fills the free slots, emptiest device first: each takes a replica of the
/// expert with the largest load per replica (as DeepSeek would) among those
/// not on the device whose new piece keeps the device within the target;
/// else the expert not on the device with the smallest new piece (the first
/// expert among equal ones in both cases).
///
/// Experts are kept in classes by replica count, each ordered by load, so a
/// slot costs O(C log E + S) for C distinct replica counts (C <= sqrt(2N))
/// instead of a scan of all experts.
void fillFreeSlots(Packing &pk, double target) {
  const Problem &pr = pk.pr;
  int64_t experts = pr.experts();
  std::vector<int64_t> devices;
  for (int64_t d = 0; d < pr.devices; ++d)
    if (pk.freeSlots(d) > 0)
      devices.push_back(d);
  if (devices.empty())
    return;
  std::stable_sort(devices.begin(), devices.end(), [&](int64_t a, int64_t b) {
    return pk.load[a] < pk.load[b];
  });
  // Class r: experts with r replicas (r < devices), by (load, -index) so that
  // the last of equal loads is the first index.
  using Key = std::pair<double, int64_t>;
  std::map<int64_t, std::set<Key>> classes;
  for (int64_t e = 0; e < experts; ++e)
    if (pk.count[e] < pr.devices)
      classes[pk.count[e]].insert({pr.load[e], -e});
  std::vector<char> here(experts, 0);
  for (int64_t d : devices) {
    // Other devices' experts gained replicas since the loads were taken.
    double load = 0;
    for (int64_t e : pk.experts[d]) {
      load += pr.load[e] / static_cast<double>(pk.count[e]);
      here[e] = 1;
    }
    while (pk.freeSlots(d) > 0) {
      int64_t best = -1;
      double bestPerReplica = -1;
      for (auto &[r, members] : classes) {
        if (members.empty())
          continue;
        double rd = static_cast<double>(r);
        // No member of this class beats the best one found.
        if (members.rbegin()->first / rd < bestPerReplica)
          continue;
        // The heaviest member whose new piece fits: the predicate is
        // monotone in the load; start near its boundary and settle it
        // exactly.
        auto fits = [&](const Key &k) {
          return load + k.first / (rd + 1) <= target;
        };
        double guess = (target - load) * (rd + 1);
        auto it = members.upper_bound({guess, 0});
        while (it != members.end() && fits(*it))
          ++it;
        while (it != members.begin() && !fits(*std::prev(it)))
          --it;
        while (it != members.begin()) {
          --it;
          int64_t e = -it->second;
          if (here[e])
            continue;
          double perReplica = it->first / rd;
          if (perReplica > bestPerReplica ||
              (perReplica == bestPerReplica && e < best)) {
            best = e;
            bestPerReplica = perReplica;
          }
          break;
        }
      }
      if (best < 0) {
        double smallestPiece = 0;
        for (auto &[r, members] : classes) {
          auto it = members.begin();
          while (it != members.end() && here[-it->second])
            ++it;
          if (it == members.end())
            continue;
          // The first index among the lightest: the last of its load.
          it = std::prev(members.upper_bound(
              {it->first, std::numeric_limits<int64_t>::max()}));
          while (here[-it->second])
            --it;
          int64_t e = -it->second;
          double piece = it->first / static_cast<double>(r + 1);
          if (best < 0 || piece < smallestPiece ||
              (piece == smallestPiece && e < best)) {
            best = e;
            smallestPiece = piece;
          }
        }
      }
      if (best < 0)
        break; // Cannot happen when slots per device <= experts.
      int64_t r = pk.count[best];
      classes[r].erase({pr.load[best], -best});
      if (r + 1 < pr.devices)
        classes[r + 1].insert({pr.load[best], -best});
      load += pr.load[best] / static_cast<double>(r + 1);
      pk.experts[d].push_back(best);
      ++pk.count[best];
      here[best] = 1;
    }
    for (int64_t e : pk.experts[d])
      here[e] = 0;
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
  // Replicas the experts from the i-th heaviest on need at least; an expert
  // that needs more than one per device does not fit at all.
  std::vector<int64_t> needAfter(experts + 1, 0);
  for (int64_t i = experts - 1; i >= 0; --i) {
    double need = target > 0 ? std::ceil(pr.load[order[i]] / limit) : 1;
    if (!(need <= static_cast<double>(pr.devices)))
      return std::nullopt;
    needAfter[i] = needAfter[i + 1] + std::max<int64_t>(1, int64_t(need));
    if (needAfter[i] > pr.slots())
      return std::nullopt;
  }

  Packing pk(pr);
  int64_t free = pr.slots();
  std::vector<int64_t> chosen;
  for (int64_t i = 0; i < experts; ++i) {
    int64_t e = order[i];
    int64_t minR = needAfter[i] - needAfter[i + 1];
    int64_t maxR = std::min(pr.devices, free - needAfter[i + 1]);
    if (minR > maxR || minR > static_cast<int64_t>(pk.open.size()))
      return std::nullopt;
    // r pieces fit when the r-th emptiest open device takes one within the
    // limit (load + piece is monotone in the load).
    auto rth = std::next(pk.open.begin(), minR - 1);
    int64_t r = minR;
    for (; r <= maxR && rth != pk.open.end(); ++r, ++rth)
      if (rth->first + pr.load[e] / static_cast<double>(r) <= limit)
        break;
    if (r > maxR || rth == pk.open.end())
      return std::nullopt;
    double piece = pr.load[e] / static_cast<double>(r);
    chosen.clear();
    if (rule == FitRule::Worst) {
      // The r emptiest devices.
      for (auto it = pk.open.begin(); int64_t(chosen.size()) < r; ++it)
        chosen.push_back(it->second);
    } else {
      // The r fullest devices among those the piece fits on.
      auto fits = [&](OpenDevices::iterator it) {
        return it->first + piece <= limit;
      };
      auto end = pk.open.lower_bound({limit - piece, -1});
      while (end != pk.open.end() && fits(end))
        ++end;
      while (end != pk.open.begin() && !fits(std::prev(end)))
        --end;
      for (auto it = end; int64_t(chosen.size()) < r;)
        chosen.push_back((--it)->second);
    }
    for (int64_t d : chosen)
      pk.place(d, e, piece);
    free -= r;
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
    // The packer meets any target >= the total load and the lower bound is
    // at least total / devices, so this takes O(log devices) steps.
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
