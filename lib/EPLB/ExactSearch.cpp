//===- ExactSearch.cpp - Branch and bound for small instances -------------===//
#include "moe/EPLB/ExactSearch.h"
#include "moe/EPLB/ShareFlow.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

namespace {
/// max(1, ceil-ed `fewest`) as a count, or devices + 1 (nothing fits) when
/// it exceeds `devices` or is not a number: a double converted to an
/// integer out of range is undefined.
int64_t replicasAtLeast(double fewest, int64_t devices) {
  if (!(fewest <= static_cast<double>(devices)))
    return devices + 1;
  return std::max<int64_t>(1, static_cast<int64_t>(fewest));
}

std::vector<int64_t> heaviestFirst(const Problem &pr) {
  std::vector<int64_t> order(pr.experts());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return pr.load[a] > pr.load[b];
  });
  return order;
}

/// Placement from the experts of each device.
Placement fromDevices(const Problem &pr,
                      const std::vector<std::vector<int64_t>> &experts) {
  Placement p;
  for (const std::vector<int64_t> &list : experts)
    p.phy2log.insert(p.phy2log.end(), list.begin(), list.end());
  setEvenShares(p, pr.experts());
  return p;
}

class EvenSearch {
public:
  EvenSearch(const Problem &pr, double upper, int64_t budget)
      : pr(pr), order(heaviestFirst(pr)), best(upper), budget(budget),
        load(pr.devices, 0.0), experts(pr.devices),
        restLoad(pr.experts() + 1, 0.0) {
    for (int64_t i = pr.experts() - 1; i >= 0; --i)
      restLoad[i] = restLoad[i + 1] + pr.load[order[i]];
    tol = 1e-9 * std::max(upper, pr.total());
  }
  ExactResult run() {
    search(0, pr.slots());
    return {std::move(found), !aborted};
  }

private:
  void search(int64_t i, int64_t free) {
    if (aborted || ++nodes > budget) {
      aborted = true;
      return;
    }
    if (i == pr.experts()) {
      double peak = *std::max_element(load.begin(), load.end());
      if (free == 0 && peak < best - tol) {
        best = peak;
        found = fromDevices(pr, experts);
      }
      return;
    }
    // Every remaining piece must sit below `best` on a device with room.
    double room = 0;
    for (int64_t d = 0; d < pr.devices; ++d)
      if (static_cast<int64_t>(experts[d].size()) < pr.perDevice)
        room += std::max(0.0, best - tol - load[d]);
    if (room < restLoad[i] - tol)
      return;
    int64_t e = order[i], rest = pr.experts() - i - 1;
    double w = pr.load[e];
    // Pieces must stay below the incumbent: r > w / (best - tol).
    int64_t minR = replicasAtLeast(std::floor(w / (best - tol)) + 1, pr.devices);
    int64_t maxR = std::min(pr.devices, free - rest);
    if (rest == 0)
      minR = std::max(minR, free);
    for (int64_t r = minR; r <= maxR; ++r) {
      double piece = w / static_cast<double>(r);
      // Classes of interchangeable devices that can take a piece.
      std::vector<int64_t> eligible;
      for (int64_t d = 0; d < pr.devices; ++d)
        if (static_cast<int64_t>(experts[d].size()) < pr.perDevice &&
            load[d] + piece < best - tol)
          eligible.push_back(d);
      if (static_cast<int64_t>(eligible.size()) < r)
        continue;
      std::stable_sort(eligible.begin(), eligible.end(),
                       [&](int64_t a, int64_t b) {
                         if (std::fabs(load[a] - load[b]) > tol)
                           return load[a] < load[b];
                         return experts[a].size() < experts[b].size();
                       });
      std::vector<std::vector<int64_t>> classes;
      for (int64_t d : eligible) {
        if (!classes.empty()) {
          int64_t last = classes.back().front();
          if (std::fabs(load[last] - load[d]) <= tol &&
              experts[last].size() == experts[d].size()) {
            classes.back().push_back(d);
            continue;
          }
        }
        classes.push_back({d});
      }
      choose(classes, 0, r, e, piece, i, free - r);
    }
  }
  /// Picks `left` devices from classes[k...], then recurses on the next
  /// expert.
  void choose(const std::vector<std::vector<int64_t>> &classes, size_t k,
              int64_t left, int64_t e, double piece, int64_t i, int64_t free) {
    if (aborted)
      return;
    if (left == 0) {
      search(i + 1, free);
      return;
    }
    if (k == classes.size())
      return;
    int64_t available = 0;
    for (size_t j = k; j < classes.size(); ++j)
      available += static_cast<int64_t>(classes[j].size());
    if (available < left)
      return;
    int64_t most = std::min<int64_t>(left, classes[k].size());
    for (int64_t take = most; take >= 0; --take) {
      for (int64_t t = 0; t < take; ++t) {
        load[classes[k][t]] += piece;
        experts[classes[k][t]].push_back(e);
      }
      choose(classes, k + 1, left - take, e, piece, i, free);
      for (int64_t t = 0; t < take; ++t) {
        load[classes[k][t]] -= piece;
        experts[classes[k][t]].pop_back();
      }
    }
  }

  const Problem &pr;
  std::vector<int64_t> order;
  double best, tol;
  int64_t budget, nodes = 0;
  bool aborted = false;
  std::vector<double> load;
  std::vector<std::vector<int64_t>> experts;
  std::vector<double> restLoad;
  std::optional<Placement> found;
};

class ShareSearch {
public:
  ShareSearch(const Problem &pr, double upper, int64_t budget)
      : pr(pr), order(heaviestFirst(pr)), best(upper), budget(budget),
        experts(pr.devices), devicesOf(pr.experts()) {
    mean = pr.total() / static_cast<double>(pr.devices);
    tol = 1e-9 * std::max(upper, pr.total());
  }
  ExactResult run() {
    if (best > mean + tol)
      search(0, pr.slots());
    return {std::move(found), !aborted};
  }

private:
  void search(int64_t i, int64_t free) {
    if (aborted || done)
      return;
    if (++nodes > budget) {
      aborted = true;
      return;
    }
    std::vector<double> placed(pr.load.size(), 0.0);
    for (int64_t j = 0; j < i; ++j)
      placed[order[j]] = pr.load[order[j]];
    double bound = minPeakWithShares(placed, devicesOf, pr.devices);
    if (bound >= best - tol)
      return;
    if (i == pr.experts()) {
      complete(bound);
      return;
    }
    int64_t e = order[i], rest = pr.experts() - i - 1;
    double w = pr.load[e];
    int64_t minR = replicasAtLeast(std::ceil(w / best - 1e-9), pr.devices);
    int64_t maxR = std::min(pr.devices, free - rest);
    std::vector<int64_t> used, fresh;
    for (int64_t d = 0; d < pr.devices; ++d) {
      if (experts[d].empty())
        fresh.push_back(d);
      else if (static_cast<int64_t>(experts[d].size()) < pr.perDevice)
        used.push_back(d);
    }
    for (int64_t r = minR; r <= maxR; ++r)
      for (int64_t k = std::min<int64_t>(r, fresh.size()); k >= 0; --k) {
        if (r - k > static_cast<int64_t>(used.size()))
          break;
        std::vector<int64_t> pick(fresh.begin(), fresh.begin() + k);
        subsets(used, 0, r - k, pick, e, i, free - r);
      }
  }
  void subsets(const std::vector<int64_t> &used, size_t from, int64_t left,
               std::vector<int64_t> &pick, int64_t e, int64_t i, int64_t free) {
    if (aborted || done)
      return;
    if (left == 0) {
      for (int64_t d : pick)
        experts[d].push_back(e);
      devicesOf[e] = pick;
      search(i + 1, free);
      devicesOf[e].clear();
      for (int64_t d : pick)
        experts[d].pop_back();
      return;
    }
    for (size_t j = from; j + left <= used.size(); ++j) {
      pick.push_back(used[j]);
      subsets(used, j + 1, left - 1, pick, e, i, free);
      pick.pop_back();
    }
  }
  /// Fills the free slots with replicas of the experts with the most load
  /// per replica that are not on the device yet, and keeps the result.
  void complete(double bound) {
    std::vector<std::vector<int64_t>> full = experts;
    std::vector<int64_t> count(pr.experts());
    for (int64_t e = 0; e < pr.experts(); ++e)
      count[e] = static_cast<int64_t>(devicesOf[e].size());
    for (int64_t d = 0; d < pr.devices; ++d)
      while (static_cast<int64_t>(full[d].size()) < pr.perDevice) {
        int64_t pickE = -1;
        for (int64_t e = 0; e < pr.experts(); ++e)
          if (std::find(full[d].begin(), full[d].end(), e) == full[d].end() &&
              (pickE < 0 ||
               pr.load[e] / count[e] > pr.load[pickE] / count[pickE]))
            pickE = e;
        full[d].push_back(pickE);
        ++count[pickE];
      }
    Placement p = fromDevices(pr, full);
    double peak = optimizeShares(p, pr.load, pr.devices);
    if (peak < best - tol) {
      best = std::max(peak, 0.0);
      found = std::move(p);
    }
    (void)bound;
    done = best <= mean + tol;
  }

  const Problem &pr;
  std::vector<int64_t> order;
  double best, tol, mean;
  int64_t budget, nodes = 0;
  bool aborted = false, done = false;
  std::vector<std::vector<int64_t>> experts;
  std::vector<std::vector<int64_t>> devicesOf;
  std::optional<Placement> found;
};
} // namespace

ExactResult eplb::exactEven(const Problem &problem, double upper,
                            int64_t nodeBudget) {
  return EvenSearch(problem, upper, nodeBudget).run();
}

ExactResult eplb::exactShares(const Problem &problem, double upper,
                              int64_t nodeBudget) {
  return ShareSearch(problem, upper, nodeBudget).run();
}
