//===- FuturePacking.cpp - Even placements for the traffic that comes next ===//
#include "moe/EPLB/FuturePacking.h"
#include "moe/EPLB/EvenPacking.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

namespace {
struct Piece {
  int64_t expert;
  double load;
  /// Its share of the variance of the next load: the square of its load
  /// plus the expert's extra variance over its replicas squared.
  double square;
};

class Packing {
public:
  Packing(const Problem &pr, const FutureOptions &options)
      : pr(pr), options(options), pieces_(pr.devices), load_(pr.devices, 0.0),
        squares_(pr.devices, 0.0) {}

  /// Heaviest pieces first, an expert's pieces onto the lightest devices
  /// with room (distinct ones: they are taken off the heap together). False
  /// when an expert finds fewer devices with room than it has pieces.
  bool packHeaviestFirst(const std::vector<int64_t> &count) {
    std::vector<int64_t> order(pr.experts());
    std::iota(order.begin(), order.end(), 0);
    auto piece = [&](int64_t e) {
      return pr.load[e] / static_cast<double>(count[e]);
    };
    auto square = [&](int64_t e) {
      double replicas = static_cast<double>(count[e]);
      double extra = pr.spread.variance.empty() ? 0.0 : pr.spread.variance[e];
      return piece(e) * piece(e) + extra / (replicas * replicas);
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return piece(a) > piece(b); });
    using Entry = std::pair<double, int64_t>; // (-load, -device)
    std::priority_queue<Entry> lightest;
    for (int64_t d = 0; d < pr.devices; ++d)
      lightest.push({-0.0, -d});
    std::vector<int64_t> taken;
    for (int64_t e : order) {
      taken.clear();
      if (static_cast<int64_t>(lightest.size()) < count[e])
        return false;
      for (int64_t k = 0; k < count[e]; ++k) {
        taken.push_back(-lightest.top().second);
        lightest.pop();
      }
      for (int64_t d : taken) {
        add(d, {e, piece(e), square(e)});
        if (static_cast<int64_t>(pieces_[d].size()) < pr.perDevice)
          lightest.push({-load_[d], -d});
      }
    }
    return true;
  }

  /// Swaps two pieces of different devices while that lowers the largest
  /// score.
  void improve(int64_t *workDone) {
    // The bound of the counts the packing used: the mean device load or
    // the largest piece (evenLowerBound(pr) for the water-filling counts of
    // the load).
    cap = pr.total() / static_cast<double>(pr.devices);
    for (const std::vector<Piece> &device : pieces_)
      for (const Piece &p : device)
        cap = std::max(cap, p.load);
    cap *= 1 + options.slack;
    // Sample load past the cap outweighs any spread.
    penalty = 100 * (1 + options.spread);
    int64_t work = 0;
    while (work < options.workBudget) {
      int64_t a = 0;
      for (int64_t d = 1; d < pr.devices; ++d)
        if (score(load_[d], squares_[d]) > score(load_[a], squares_[a]))
          a = d;
      double worst = score(load_[a], squares_[a]);
      double best = worst * (1 - 1e-12);
      int64_t bestI = -1, bestB = -1, bestJ = -1;
      for (size_t i = 0; i < pieces_[a].size(); ++i) {
        const Piece &p = pieces_[a][i];
        for (int64_t b = 0; b < pr.devices; ++b) {
          if (b == a)
            continue;
          work += static_cast<int64_t>(pieces_[b].size());
          for (size_t j = 0; j < pieces_[b].size(); ++j) {
            const Piece &q = pieces_[b][j];
            if (q.expert == p.expert)
              continue;
            double delta = q.load - p.load;
            double deltaSquares = q.square - p.square;
            double after =
                std::max(score(load_[a] + delta, squares_[a] + deltaSquares),
                         score(load_[b] - delta, squares_[b] - deltaSquares));
            if (after >= best || holds(a, q.expert) || holds(b, p.expert))
              continue;
            best = after;
            bestI = static_cast<int64_t>(i);
            bestB = b;
            bestJ = static_cast<int64_t>(j);
          }
        }
      }
      if (bestI < 0)
        break;
      Piece p = pieces_[a][bestI], q = pieces_[bestB][bestJ];
      replace(a, bestI, q);
      replace(bestB, bestJ, p);
    }
    if (workDone)
      *workDone += work;
  }

  Placement placement() const {
    Placement out;
    for (const std::vector<Piece> &device : pieces_)
      for (const Piece &p : device)
        out.phy2log.push_back(p.expert);
    setEvenShares(out, pr.experts());
    return out;
  }

private:
  double score(double load, double squares) const {
    return load + options.spread * std::sqrt(std::max(0.0, squares)) +
           penalty * std::max(0.0, load - cap);
  }
  bool holds(int64_t d, int64_t e) const {
    return std::any_of(pieces_[d].begin(), pieces_[d].end(),
                       [&](const Piece &p) { return p.expert == e; });
  }
  void add(int64_t d, Piece p) {
    pieces_[d].push_back(p);
    load_[d] += p.load;
    squares_[d] += p.square;
  }
  void replace(int64_t d, int64_t i, Piece p) {
    Piece old = pieces_[d][i];
    pieces_[d][i] = p;
    load_[d] += p.load - old.load;
    squares_[d] += p.square - old.square;
  }

  const Problem &pr;
  const FutureOptions &options;
  std::vector<std::vector<Piece>> pieces_;
  std::vector<double> load_, squares_;
  double cap = 0, penalty = 0;
};
} // namespace

std::optional<Placement> eplb::planForFuture(const Problem &pr,
                                            const FutureOptions &options,
                                            int64_t *workDone) {
  Packing packing(pr, options);
  std::vector<int64_t> counts =
      pr.spread.replicaLoad.empty()
          ? waterFillingCounts(pr)
          : waterFillingCounts({pr.spread.replicaLoad, pr.devices, pr.perDevice});
  if (!packing.packHeaviestFirst(counts))
    return std::nullopt;
  packing.improve(workDone);
  return packing.placement();
}
