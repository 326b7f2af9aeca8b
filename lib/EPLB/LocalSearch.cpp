//===- LocalSearch.cpp - Improve an even-split placement ------------------===//
#include "moe/EPLB/LocalSearch.h"

#include <algorithm>
#include <limits>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

namespace {
/// Load changes on a few devices, summed per device.
struct Delta {
  std::vector<std::pair<int64_t, double>> entries;
  void clear() { entries.clear(); }
  void add(int64_t device, double change) {
    for (auto &[d, c] : entries)
      if (d == device) {
        c += change;
        return;
      }
    entries.push_back({device, change});
  }
};

class Search {
public:
  Search(const Problem &pr, Placement &p)
      : pr(pr), slotExpert(p.phy2log), perDevice(pr.perDevice),
        load(pr.devices, 0.0), on(pr.devices * pr.experts(), 0),
        slotsOf(pr.experts()) {
    for (int64_t s = 0; s < pr.slots(); ++s) {
      slotsOf[slotExpert[s]].push_back(s);
      on[device(s) * pr.experts() + slotExpert[s]] = 1;
    }
    for (int64_t s = 0; s < pr.slots(); ++s)
      load[device(s)] += piece(slotExpert[s]);
  }

  /// Applies the best improving move for the peak device; false at a local
  /// optimum.
  bool step(double goodEnough) {
    int64_t star = std::max_element(load.begin(), load.end()) - load.begin();
    double peak = load[star];
    if (peak <= goodEnough)
      return false;
    limit = peak * (1 - 1e-12) - 1e-12;
    bestScore = peak;
    bestKind = None;
    for (int64_t p = star * perDevice; p < (star + 1) * perDevice; ++p) {
      trySwaps(star, p);
      tryRepurposeHere(star, p);
      trySplitElsewhere(star, p);
    }
    if (bestKind == None)
      tryPairSwaps(star);
    if (bestKind == None)
      return false;
    apply();
    return true;
  }
  void writeBack(Placement &p) {
    p.phy2log = slotExpert;
    setEvenShares(p, pr.experts());
  }

private:
  enum Kind { None, Swap, Repurpose, PairSwap };
  int64_t device(int64_t slot) const { return slot / perDevice; }
  int64_t replicas(int64_t e) const {
    return static_cast<int64_t>(slotsOf[e].size());
  }
  double piece(int64_t e) const {
    return pr.load[e] / static_cast<double>(replicas(e));
  }
  bool has(int64_t d, int64_t e) const { return on[d * pr.experts() + e]; }

  /// The highest load the delta leaves on the devices it touches (the peak
  /// device among them), or the old peak when one of them stays at or above it.
  double score(const Delta &delta) const {
    double worst = 0;
    for (auto [d, c] : delta.entries) {
      double after = load[d] + c;
      if (after >= limit)
        return bestScore;
      worst = std::max(worst, after);
    }
    return worst;
  }
  void consider(const Delta &delta, Kind kind, int64_t a, int64_t b) {
    double s = score(delta);
    if (s < bestScore) {
      bestScore = s;
      bestKind = kind;
      moveA = a;
      moveB = b;
    }
  }

  void trySwaps(int64_t star, int64_t p) {
    int64_t x = slotExpert[p];
    double px = piece(x);
    for (int64_t q = 0; q < pr.slots(); ++q) {
      int64_t d = device(q), y = slotExpert[q];
      if (d == star || y == x)
        continue;
      double py = piece(y);
      if (py >= px || has(d, x) || has(star, y) || load[d] - py + px >= limit)
        continue;
      Delta delta;
      delta.add(star, py - px);
      delta.add(d, px - py);
      consider(delta, Swap, p, q);
    }
  }
  /// Swaps two replicas of the peak device with two of another device. The
  /// best swap moves half the load gap, so per device the incoming pairs
  /// are sorted by load and searched around that value.
  void tryPairSwaps(int64_t star) {
    struct Pair {
      double sum;
      int64_t a, b;
    };
    std::vector<Pair> mine, theirs;
    int64_t first = star * perDevice, last = first + perDevice;
    for (int64_t p1 = first; p1 < last; ++p1)
      for (int64_t p2 = p1 + 1; p2 < last; ++p2)
        mine.push_back({piece(slotExpert[p1]) + piece(slotExpert[p2]), p1, p2});
    for (int64_t d = 0; d < pr.devices; ++d) {
      if (d == star)
        continue;
      int64_t dFirst = d * perDevice, dLast = dFirst + perDevice;
      theirs.clear();
      for (int64_t q1 = dFirst; q1 < dLast; ++q1) {
        if (has(star, slotExpert[q1]))
          continue;
        for (int64_t q2 = q1 + 1; q2 < dLast; ++q2)
          if (!has(star, slotExpert[q2]))
            theirs.push_back(
                {piece(slotExpert[q1]) + piece(slotExpert[q2]), q1, q2});
      }
      if (theirs.empty())
        continue;
      std::sort(theirs.begin(), theirs.end(),
                [](const Pair &x, const Pair &y) { return x.sum < y.sum; });
      double gap = load[star] - load[d];
      for (const Pair &out : mine) {
        if (has(d, slotExpert[out.a]) || has(d, slotExpert[out.b]))
          continue;
        double ideal = out.sum - gap / 2;
        auto it =
            std::lower_bound(theirs.begin(), theirs.end(), ideal,
                             [](const Pair &x, double v) { return x.sum < v; });
        for (auto cand : {it, it == theirs.begin() ? it : it - 1}) {
          if (cand == theirs.end())
            continue;
          double in = cand->sum;
          if (in >= out.sum || load[d] - in + out.sum >= limit)
            continue;
          double s =
              std::max(load[star] - out.sum + in, load[d] - in + out.sum);
          if (s < bestScore) {
            bestScore = s;
            bestKind = PairSwap;
            moveA = out.a * pr.slots() + out.b;
            moveB = cand->a * pr.slots() + cand->b;
          }
        }
      }
    }
  }

  /// Slot p on the peak device stops holding x (which keeps other replicas)
  /// and holds a new replica of y instead.
  void tryRepurposeHere(int64_t star, int64_t p) {
    int64_t x = slotExpert[p];
    if (replicas(x) < 2)
      return;
    double rx = static_cast<double>(replicas(x));
    double grow = pr.load[x] / (rx - 1) - pr.load[x] / rx;
    for (int64_t s : slotsOf[x])
      if (s != p && load[device(s)] + grow >= limit)
        return;
    for (int64_t y = 0; y < pr.experts(); ++y) {
      if (y == x || has(star, y) || replicas(y) >= pr.devices)
        continue;
      double ry = static_cast<double>(replicas(y));
      double newPiece = pr.load[y] / (ry + 1);
      if (load[star] - pr.load[x] / rx + newPiece >= bestScore)
        continue;
      consider(repurposeDelta(p, y), Repurpose, p, y);
    }
  }
  /// A slot q elsewhere stops holding x and holds a new replica of the
  /// peak device's expert z, lowering z's piece everywhere.
  void trySplitElsewhere(int64_t star, int64_t p) {
    int64_t z = slotExpert[p];
    if (replicas(z) >= pr.devices)
      return;
    for (int64_t q = 0; q < pr.slots(); ++q) {
      int64_t d = device(q), x = slotExpert[q];
      if (d == star || x == z || has(d, z) || replicas(x) < 2)
        continue;
      double zPiece = pr.load[z] / static_cast<double>(replicas(z) + 1);
      if (load[d] - piece(x) + zPiece >= bestScore)
        continue;
      consider(repurposeDelta(q, z), Repurpose, q, z);
    }
  }
  /// The load changes of re-purposing `slot` to `y` (in a reused buffer).
  const Delta &repurposeDelta(int64_t slot, int64_t y) {
    int64_t x = slotExpert[slot];
    double rx = static_cast<double>(replicas(x));
    double ry = static_cast<double>(replicas(y));
    Delta &delta = scratch;
    delta.clear();
    double grow = pr.load[x] / (rx - 1) - pr.load[x] / rx;
    for (int64_t s : slotsOf[x])
      delta.add(device(s), s == slot ? -pr.load[x] / rx : grow);
    double drop = pr.load[y] / ry - pr.load[y] / (ry + 1);
    for (int64_t s : slotsOf[y])
      delta.add(device(s), -drop);
    delta.add(device(slot), pr.load[y] / (ry + 1));
    return delta;
  }

  void apply() {
    if (bestKind == PairSwap) {
      swapSlots(moveA / pr.slots(), moveB / pr.slots());
      swapSlots(moveA % pr.slots(), moveB % pr.slots());
      return;
    }
    if (bestKind == Swap) {
      swapSlots(moveA, moveB);
      return;
    }
    int64_t slot = moveA, y = moveB, x = slotExpert[slot];
    std::vector<std::pair<int64_t, double>> changes =
        repurposeDelta(slot, y).entries;
    for (auto [d, c] : changes)
      load[d] += c;
    on[device(slot) * pr.experts() + x] = 0;
    on[device(slot) * pr.experts() + y] = 1;
    setSlot(slot, y);
  }
  void swapSlots(int64_t p, int64_t q) {
    int64_t x = slotExpert[p], y = slotExpert[q];
    double px = piece(x), py = piece(y);
    load[device(p)] += py - px;
    load[device(q)] += px - py;
    setSlot(p, y);
    setSlot(q, x);
    on[device(p) * pr.experts() + x] = 0;
    on[device(q) * pr.experts() + y] = 0;
    on[device(p) * pr.experts() + y] = 1;
    on[device(q) * pr.experts() + x] = 1;
  }
  void setSlot(int64_t slot, int64_t e) {
    std::vector<int64_t> &old = slotsOf[slotExpert[slot]];
    old.erase(std::find(old.begin(), old.end(), slot));
    slotExpert[slot] = e;
    slotsOf[e].push_back(slot);
  }

  const Problem &pr;
  std::vector<int64_t> slotExpert;
  int64_t perDevice;
  std::vector<double> load;
  std::vector<char> on;
  std::vector<std::vector<int64_t>> slotsOf;
  Delta scratch;
  double limit = 0, bestScore = 0;
  Kind bestKind = None;
  int64_t moveA = 0, moveB = 0;
};
} // namespace

Placement eplb::improveEven(const Problem &problem, Placement placement,
                            double goodEnough, int64_t maxMoves) {
  Search search(problem, placement);
  for (int64_t move = 0; move < maxMoves && search.step(goodEnough); ++move) {
  }
  search.writeBack(placement);
  return placement;
}

/// Replaces each second replica of an expert on one device by a replica of
/// the expert that leaves the touched devices lightest.
Placement eplb::separateDuplicates(const Problem &pr, Placement p) {
  int64_t experts = pr.experts();
  for (int64_t d = 0; d < pr.devices; ++d) {
    int64_t first = d * pr.perDevice, last = first + pr.perDevice;
    for (int64_t s = first; s < last; ++s) {
      if (std::find(p.phy2log.begin() + first, p.phy2log.begin() + s,
                    p.phy2log[s]) == p.phy2log.begin() + s)
        continue;
      std::vector<char> here(experts, 0);
      for (int64_t t = first; t < last; ++t)
        here[p.phy2log[t]] = 1;
      int64_t best = -1;
      double bestPeak = std::numeric_limits<double>::infinity();
      for (int64_t y = 0; y < experts; ++y) {
        if (here[y])
          continue;
        Placement trial = p;
        trial.phy2log[s] = y;
        setEvenShares(trial, experts);
        double peak = peakLoad(trial, pr.load, pr.devices);
        if (peak < bestPeak) {
          bestPeak = peak;
          best = y;
        }
      }
      p.phy2log[s] = best;
    }
  }
  setEvenShares(p, experts);
  return p;
}
