//===- Pairing.cpp - Two slots per device: replica counts for pairs -------===//
#include "moe/EPLB/Pairing.h"

#include <algorithm>
#include <numeric>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

namespace {
/// Experts by piece, smallest first.
std::vector<int64_t> byPiece(const std::vector<double> &load,
                             const std::vector<int64_t> &counts) {
  std::vector<int64_t> order(load.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    double pa = load[a] / static_cast<double>(counts[a]);
    double pb = load[b] / static_cast<double>(counts[b]);
    return pa != pb ? pa < pb : a < b;
  });
  return order;
}
} // namespace

namespace {
constexpr int64_t kMaxPartnerSearch = 1024;

/// A run of equal pieces: `count` replicas of `expert`, each `piece`.
struct Run {
  double piece;
  int64_t expert, count;
};

/// The peak of pairing the pieces of `runs` (sorted by piece) outside in,
/// one run segment at a time: O(runs), not O(pieces).
double runPeak(const std::vector<Run> &runs) {
  int64_t n = 0;
  for (const Run &r : runs)
    n += r.count;
  if (runs.empty())
    return 0;
  // Front position k pairs with n - 1 - k; runs i and j hold them, at
  // positions [.., iEnd) and [jStart, ..).
  size_t i = 0, j = runs.size() - 1;
  int64_t iEnd = runs[0].count, jStart = n - runs[j].count;
  double peak = 0;
  for (int64_t k = 0, half = n / 2; k < half;) {
    while (k >= iEnd)
      iEnd += runs[++i].count;
    while (n - 1 - k < jStart)
      jStart -= runs[--j].count;
    int64_t step =
        std::min({iEnd - k, (n - 1 - k) - jStart + 1, half - k});
    peak = std::max(peak, runs[i].piece + runs[j].piece);
    k += step;
  }
  return peak;
}

bool runBefore(const Run &a, const Run &b) {
  return a.piece != b.piece ? a.piece < b.piece : a.expert < b.expert;
}

std::vector<Run> runsOf(const std::vector<double> &load,
                        const std::vector<int64_t> &counts) {
  std::vector<Run> runs;
  for (int64_t e : byPiece(load, counts))
    runs.push_back({load[e] / static_cast<double>(counts[e]), e, counts[e]});
  return runs;
}
} // namespace

double eplb::pairedPeak(const std::vector<double> &load,
                        const std::vector<int64_t> &counts) {
  return runPeak(runsOf(load, counts));
}

std::vector<int64_t> eplb::improvePairCounts(const Problem &pr,
                                             std::vector<int64_t> counts,
                                             int64_t receivers,
                                             int64_t maxMoves,
                                             int64_t workBudget) {
  int64_t experts = pr.experts();
  std::vector<Run> runs = runsOf(pr.load, counts);
  double peak = runPeak(runs);
  std::vector<Run> trial;
  trial.reserve(runs.size() + 2);
  // The runs after moving a replica from x to y: O(E).
  auto evaluate = [&](int64_t x, int64_t y) {
    Run nx{pr.load[x] / static_cast<double>(counts[x] - 1), x, counts[x] - 1};
    Run ny{pr.load[y] / static_cast<double>(counts[y] + 1), y, counts[y] + 1};
    if (runBefore(ny, nx))
      std::swap(nx, ny);
    trial.clear();
    int inserted = 0;
    for (const Run &r : runs) {
      if (r.expert == x || r.expert == y)
        continue;
      while (inserted < 2 && runBefore(inserted ? ny : nx, r))
        trial.push_back(inserted++ ? ny : nx);
      trial.push_back(r);
    }
    while (inserted < 2)
      trial.push_back(inserted++ ? ny : nx);
    return runPeak(trial);
  };
  int64_t work = 0;
  std::vector<int64_t> donors;
  for (int64_t move = 0; move < maxMoves; ++move) {
    std::vector<int64_t> targets;
    for (int64_t k = 0; k < std::min(receivers, experts); ++k) {
      targets.push_back(runs[k].expert);
      targets.push_back(runs[experts - 1 - k].expert);
    }
    // Donors: the kMaxDonors experts with several replicas whose pieces
    // grow least when they give one up, in index order.
    donors.clear();
    for (int64_t x = 0; x < experts; ++x)
      if (counts[x] >= 2)
        donors.push_back(x);
    auto growth = [&](int64_t x) {
      return pr.load[x] / static_cast<double>(counts[x] - 1) -
             pr.load[x] / static_cast<double>(counts[x]);
    };
    if (static_cast<int64_t>(donors.size()) > kMaxDonors) {
      std::nth_element(donors.begin(), donors.begin() + kMaxDonors,
                       donors.end(), [&](int64_t a, int64_t b) {
                         double ga = growth(a), gb = growth(b);
                         return ga != gb ? ga < gb : a < b;
                       });
      donors.resize(kMaxDonors);
      std::sort(donors.begin(), donors.end());
    }
    int64_t cost = static_cast<int64_t>(donors.size() * targets.size()) *
                   (experts + 2);
    if (work + cost > workBudget)
      break;
    work += cost;
    double best = peak * (1 - 1e-12);
    int64_t from = -1, to = -1;
    for (int64_t x : donors)
      for (int64_t y : targets) {
        if (y == x || counts[y] >= pr.devices)
          continue;
        double value = evaluate(x, y);
        if (value < best) {
          best = value;
          from = x;
          to = y;
        }
      }
    if (from < 0)
      break;
    --counts[from];
    ++counts[to];
    runs = runsOf(pr.load, counts);
    peak = best;
  }
  return counts;
}

Placement eplb::pairPlacement(const Problem &pr,
                              const std::vector<int64_t> &counts) {
  std::vector<int64_t> items;
  for (int64_t e : byPiece(pr.load, counts))
    items.insert(items.end(), counts[e], e);
  int64_t pairs = static_cast<int64_t>(items.size()) / 2;
  std::vector<int64_t> small(items.begin(), items.begin() + pairs);
  std::vector<int64_t> large(items.rbegin(), items.rbegin() + pairs);
  for (int64_t k = 0; k < pairs; ++k) {
    if (small[k] != large[k])
      continue;
    // The nearest partner that fixes it, within kMaxPartnerSearch pairs (a
    // pair left holding one expert twice makes the placement invalid, and
    // the planner drops it).
    for (int64_t step = 1; step < std::min(pairs, kMaxPartnerSearch); ++step) {
      int64_t j = k + step < pairs ? k + step : k - step;
      if (j < 0)
        continue;
      if (small[j] != large[k] && small[k] != large[j]) {
        std::swap(small[k], small[j]);
        break;
      }
    }
  }
  Placement p;
  for (int64_t k = 0; k < pairs; ++k) {
    p.phy2log.push_back(large[k]);
    p.phy2log.push_back(small[k]);
  }
  setEvenShares(p, pr.experts());
  return p;
}
