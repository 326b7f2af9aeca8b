//===- FuturePacking.cpp - Even placements for the traffic that comes next ===//
#include "moe/EPLB/FuturePacking.h"
#include "moe/EPLB/EvenPacking.h"

#include <algorithm>
#include <cmath>
#include <limits>
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
  /// Its expert's group (Problem::groups).
  int64_t group;
};

class Packing {
public:
  Packing(const Problem &pr, const FutureOptions &options)
      : pr(pr), options(options), pieces_(pr.devices), load_(pr.devices, 0.0),
        squares_(pr.devices, 0.0), cross_(pr.devices, 0.0),
        groupLoadA_(std::max<int64_t>(1, pr.groups), 0.0),
        groupLoadB_(std::max<int64_t>(1, pr.groups), 0.0) {
    // No groups, or groups that do not divide the experts: no correlation.
    if (pr.groups > 1 && pr.experts() % pr.groups == 0) {
      groupSize = pr.experts() / pr.groups;
      correlation = options.groupCorrelation;
    }
  }

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
        add(d, {e, piece(e), square(e), correlation > 0 ? e / groupSize : 0});
        if (static_cast<int64_t>(pieces_[d].size()) < pr.perDevice)
          lightest.push({-load_[d], -d});
      }
    }
    return true;
  }

  /// Swaps two pieces of different devices while that lowers the objective
  /// (FutureOptions::objective).
  void improve(int64_t *workDone) {
    // The bound of the counts the packing used: the mean device load or
    // the largest piece (evenLowerBound(pr) for the water-filling counts of
    // the load).
    mean = pr.total() / static_cast<double>(pr.devices);
    cap = mean;
    for (const std::vector<Piece> &device : pieces_)
      for (const Piece &p : device)
        cap = std::max(cap, p.load);
    cap *= 1 + options.slack;
    if (options.objective == FutureObjective::ExpectedPeak ||
        (options.objective == FutureObjective::Auto && correlation > 0))
      improveExpectedPeak(workDone);
    else
      improvePeakScore(workDone);
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
  /// The minimax of  load + spread * sqrt(variance)  (plus the penalty).
  void improvePeakScore(int64_t *workDone) {
    // Sample load past the cap outweighs any spread.
    penalty = 100 * (1 + options.spread);
    auto score = [&](double load, double variance) {
      return load + options.spread * std::sqrt(std::max(0.0, variance)) +
             penalty * std::max(0.0, load - cap);
    };
    int64_t work = 0;
    while (work < options.workBudget) {
      int64_t a = 0;
      for (int64_t d = 1; d < pr.devices; ++d)
        if (score(load_[d], variance(d)) > score(load_[a], variance(a)))
          a = d;
      double best = score(load_[a], variance(a)) * (1 - 1e-12);
      auto none = [](int64_t) { return false; };
      Swap chosen = bestSwap(a, false, best, work, none, [&](const Swap &s) {
        return std::max(score(load_[a] + s.delta, variance(a) + s.varianceA),
                        score(load_[s.b] - s.delta, variance(s.b) + s.varianceB));
      });
      if (chosen.i < 0)
        break;
      apply(a, chosen);
    }
    if (workDone)
      *workDone += work;
  }

  /// Lowers  sum over devices of exp(x_d),  x_d = (load_d / mean - 1) / tau +
  /// drift^2 variance_d / (2 tau^2 mean^2)  (plus the penalty): tau log of it
  /// bounds the expected peak when device d's next load is normal with that
  /// mean and variance (E max <= tau log sum E exp(load / tau)); tau = s /
  /// sqrt(2 log D), s the typical device's deviation, makes the bound
  /// tightest for D alike devices, and FutureOptions::tauScale sharpens it.
  /// Every device counts, the hotter ones exponentially more.
  void improveExpectedPeak(int64_t *workDone) {
    if (!(mean > 0))
      return;
    double meanVariance = 0;
    for (int64_t d = 0; d < pr.devices; ++d)
      meanVariance += variance(d) / static_cast<double>(pr.devices);
    double deviation = options.drift * std::sqrt(meanVariance) / mean;
    double tau =
        options.tauScale * deviation / std::sqrt(2 * std::log(std::max(2.0, double(pr.devices))));
    if (!(tau > 0))
      return;
    // Sample load past the cap outweighs any spread.
    penalty = 100;
    double varianceWeight = options.drift * options.drift / (2 * tau * tau * mean * mean);
    auto exponent = [&](double load, double variance) {
      return (load / mean - 1) / tau + varianceWeight * variance +
             penalty * std::max(0.0, load - cap) / (mean * tau);
    };
    int64_t work = 0;
    std::vector<int64_t> order(pr.devices);
    std::vector<double> term(pr.devices);
    std::vector<int64_t> rank(pr.devices);
    while (work < options.workBudget) {
      // Terms relative to the largest, so that exp does not overflow.
      double top = -std::numeric_limits<double>::infinity();
      for (int64_t d = 0; d < pr.devices; ++d)
        top = std::max(top, term[d] = exponent(load_[d], variance(d)));
      double total = 0;
      for (int64_t d = 0; d < pr.devices; ++d)
        total += term[d] = std::exp(term[d] - top);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
        return term[x] > term[y] || (term[x] == term[y] && x < y);
      });
      for (int64_t k = 0; k < pr.devices; ++k)
        rank[order[k]] = k;
      // A swap changes two terms; one that lowers the sum by less than this
      // is not worth its time.
      double least = options.minGain * total;
      bool moved = false;
      for (int64_t k = 0; k < pr.devices && !moved; ++k) {
        int64_t a = order[k];
        // A search from a looks at fewer than its pieces times all slots.
        int64_t next = static_cast<int64_t>(pieces_[a].size()) * pr.slots();
        if (work + next > options.workBudget)
          break;
        // Devices before a in the order found no swap with a in this pass,
        // and a swap lowers the sum by less than the two terms.
        if (2 * term[a] < least)
          break;
        // Devices before a in the order were searched from already.
        auto searched = [&](int64_t b) { return rank[b] < k; };
        Swap chosen = bestSwap(a, true, -least, work, searched, [&](const Swap &s) {
          return std::exp(exponent(load_[a] + s.delta, variance(a) + s.varianceA) - top) - term[a] +
                 std::exp(exponent(load_[s.b] - s.delta, variance(s.b) + s.varianceB) - top) -
                 term[s.b];
        });
        if (chosen.i >= 0) {
          apply(a, chosen);
          moved = true;
        }
      }
      if (!moved)
        break;
    }
    if (workDone)
      *workDone += work;
  }

  /// A swap of piece i of some device a with piece j of device b: a's load
  /// changes by delta, b's by -delta, their variances (variance()) by
  /// varianceA and varianceB.
  struct Swap {
    int64_t i = -1, b = -1, j = -1;
    double delta = 0, varianceA = 0, varianceB = 0;
  };

  /// The swap of a piece of device a with a piece of another device b
  /// (skip(b) false), one replica of an expert per device, with the least
  /// value(swap) below `below` (none: i = -1). `capped`: none that takes a device's sample
  /// load past both the cap and the higher of the two loads. Adds the
  /// pieces looked at to `work`.
  template <typename Skip, typename Value>
  Swap bestSwap(int64_t a, bool capped, double below, int64_t &work, Skip skip, Value value) {
    Swap best;
    const std::vector<Piece> &onA = pieces_[a];
    // Each group's load on a, and on b.
    for (const Piece &p : onA)
      groupLoadA_[p.group] += p.load;
    for (int64_t b = 0; b < pr.devices; ++b) {
      if (b == a || skip(b))
        continue;
      const std::vector<Piece> &onB = pieces_[b];
      double limit = std::max({cap, load_[a], load_[b]});
      work += static_cast<int64_t>(onA.size() * onB.size());
      if (correlation > 0)
        for (const Piece &q : onB)
          groupLoadB_[q.group] += q.load;
      for (size_t i = 0; i < onA.size(); ++i) {
        const Piece &p = onA[i];
        for (size_t j = 0; j < onB.size(); ++j) {
          const Piece &q = onB[j];
          Swap s;
          s.delta = q.load - p.load;
          if (capped && std::max(load_[a] + s.delta, load_[b] - s.delta) > limit)
            continue;
          s.i = static_cast<int64_t>(i);
          s.b = b;
          s.j = static_cast<int64_t>(j);
          s.varianceA = q.square - p.square;
          s.varianceB = p.square - q.square;
          if (correlation > 0) {
            // Twice the products of same-group pieces: p leaves a (the
            // other pieces of its group there) and q arrives (the pieces of
            // its group left there); likewise on b.
            double pOthersOnA = groupLoadA_[p.group] - p.load;
            double qOthersOnB = groupLoadB_[q.group] - q.load;
            bool same = p.group == q.group;
            double qGroupOnA = same ? pOthersOnA : groupLoadA_[q.group];
            double pGroupOnB = same ? qOthersOnB : groupLoadB_[p.group];
            s.varianceA += 2 * correlation * (q.load * qGroupOnA - p.load * pOthersOnA);
            s.varianceB += 2 * correlation * (p.load * pGroupOnB - q.load * qOthersOnB);
          }
          double v = value(s);
          if (v >= below || q.expert == p.expert || holds(a, q.expert) || holds(b, p.expert))
            continue;
          below = v;
          best = s;
        }
      }
      if (correlation > 0)
        for (const Piece &q : onB)
          groupLoadB_[q.group] = 0;
    }
    for (const Piece &p : onA)
      groupLoadA_[p.group] = 0;
    return best;
  }

  void apply(int64_t a, const Swap &s) {
    Piece p = pieces_[a][s.i], q = pieces_[s.b][s.j];
    replace(a, s.i, q);
    replace(s.b, s.j, p);
  }

  /// A device's variance of its next load, in units of drift^2: the sum of
  /// its pieces' squares plus the correlation times twice the products of
  /// its same-group pieces (cross_).
  double variance(int64_t d) const { return squares_[d] + correlation * cross_[d]; }

  bool holds(int64_t d, int64_t e) const {
    return std::any_of(pieces_[d].begin(), pieces_[d].end(),
                       [&](const Piece &p) { return p.expert == e; });
  }
  void add(int64_t d, Piece p) {
    if (correlation > 0)
      cross_[d] += 2 * p.load * groupLoad(d, p.group, -1);
    pieces_[d].push_back(p);
    load_[d] += p.load;
    squares_[d] += p.square;
  }
  void replace(int64_t d, int64_t i, Piece p) {
    Piece old = pieces_[d][i];
    if (correlation > 0)
      cross_[d] +=
          2 * p.load * groupLoad(d, p.group, i) - 2 * old.load * groupLoad(d, old.group, i);
    pieces_[d][i] = p;
    load_[d] += p.load - old.load;
    squares_[d] += p.square - old.square;
  }
  /// The load of group g's pieces on device d but its piece `except`.
  double groupLoad(int64_t d, int64_t g, int64_t except) const {
    double sum = 0;
    for (size_t k = 0; k < pieces_[d].size(); ++k)
      if (static_cast<int64_t>(k) != except && pieces_[d][k].group == g)
        sum += pieces_[d][k].load;
    return sum;
  }

  const Problem &pr;
  const FutureOptions &options;
  std::vector<std::vector<Piece>> pieces_;
  /// Per device: its sample load, the sum of its pieces' squares and twice
  /// the sum of the products of its same-group pieces.
  std::vector<double> load_, squares_, cross_;
  /// Scratch: each group's load on the two devices of a swap.
  std::vector<double> groupLoadA_, groupLoadB_;
  int64_t groupSize = 1;
  double correlation = 0;
  double mean = 0, cap = 0, penalty = 0;
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
