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

double eplb::pairedPeak(const std::vector<double> &load,
                        const std::vector<int64_t> &counts) {
  std::vector<double> pieces;
  for (int64_t e : byPiece(load, counts))
    pieces.insert(pieces.end(), counts[e],
                  load[e] / static_cast<double>(counts[e]));
  double peak = 0;
  for (size_t k = 0, n = pieces.size(); k < n / 2; ++k)
    peak = std::max(peak, pieces[k] + pieces[n - 1 - k]);
  return peak;
}

std::vector<int64_t> eplb::improvePairCounts(const Problem &pr,
                                             std::vector<int64_t> counts,
                                             int64_t receivers,
                                             int64_t maxMoves) {
  int64_t experts = pr.experts();
  double peak = pairedPeak(pr.load, counts);
  for (int64_t move = 0; move < maxMoves; ++move) {
    std::vector<int64_t> order = byPiece(pr.load, counts);
    std::vector<int64_t> targets;
    for (int64_t k = 0; k < std::min(receivers, experts); ++k) {
      targets.push_back(order[k]);
      targets.push_back(order[experts - 1 - k]);
    }
    double best = peak * (1 - 1e-12);
    int64_t from = -1, to = -1;
    for (int64_t x = 0; x < experts; ++x) {
      if (counts[x] < 2)
        continue;
      for (int64_t y : targets) {
        if (y == x || counts[y] >= pr.devices)
          continue;
        --counts[x];
        ++counts[y];
        double value = pairedPeak(pr.load, counts);
        ++counts[x];
        --counts[y];
        if (value < best) {
          best = value;
          from = x;
          to = y;
        }
      }
    }
    if (from < 0)
      break;
    --counts[from];
    ++counts[to];
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
    for (int64_t step = 1; step < pairs; ++step) {
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
