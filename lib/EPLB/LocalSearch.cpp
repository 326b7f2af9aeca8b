//===- LocalSearch.cpp - Improve an even-split placement ------------------===//
//
// Memory is O(N + E + D): which device holds which expert is marked per step
// (the peak device's experts) and per candidate (an expert's devices) in
// scratch arrays, never in a devices x experts matrix.
//
// A step looks at every move of the peak device's S slots but prunes with
// per-step orders: each device's pieces sorted (a swap with device d is
// best near half the load gap, so it is found by binary search), the
// candidate experts of a re-purposed slot sorted by their new piece (the
// search stops at the first that cannot win), and each expert's devices
// sorted by load (re-purposing one of its slots is best on its lightest
// device). A step costs O(N log N + S (E + D log S)) plus the replicas the
// candidates touch; two-for-two swaps, tried only when no single move
// helps, O(D S^2 log S).
//
//===----------------------------------------------------------------------===//
#include "moe/EPLB/LocalSearch.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

namespace {
class Search {
public:
  Search(const Problem &pr, Placement &p)
      : pr(pr), slotExpert(p.phy2log), perDevice(pr.perDevice),
        load(pr.devices, 0.0), slotsOf(pr.experts()),
        replicaCount(pr.experts(), 0),
        expertPiece(pr.experts(), 0.0), slotDevice(pr.slots()),
        starHas(pr.experts(), 0), otherHas(pr.experts(), 0),
        deviceMark(pr.devices, 0), change(pr.devices, 0.0),
        changed(pr.devices, 0), baseInfo(pr.experts()),
        sharedStamp(pr.experts(), 0),
        sortedPieces(pr.slots()), byLoadStart(pr.experts() + 1, 0),
        byLoad(pr.slots()) {
    for (int64_t s = 0; s < pr.slots(); ++s) {
      slotsOf[slotExpert[s]].push_back(s);
      ++replicaCount[slotExpert[s]];
      slotDevice[s] = s / perDevice;
    }
    for (int64_t e = 0; e < pr.experts(); ++e) {
      updatePiece(e);
      if (replicas(e) < pr.devices)
        newPieces.insert({newPieceOf(e), e});
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
    int64_t first = star * perDevice, last = first + perDevice;
    for (int64_t p = first; p < last; ++p)
      starHas[slotExpert[p]] = 1;
    prepare();
    computeBaseInfo();
    for (int64_t p = first; p < last; ++p) {
      trySwaps(star, p);
      tryRepurposeHere(star, p);
      trySplitElsewhere(star, p);
    }
    if (bestKind == None && perDevice <= kMaxPairSwapSlots)
      tryPairSwaps(star);
    for (int64_t p = first; p < last; ++p)
      starHas[slotExpert[p]] = 0;
    if (bestKind == None)
      return false;
    apply();
    return true;
  }
  void writeBack(Placement &p) {
    p.phy2log = slotExpert;
    setEvenShares(p, pr.experts());
  }
  /// Elementary steps done so far (loop iterations, replicas visited).
  int64_t work = 0;

private:
  enum Kind { None, Swap, Repurpose, PairSwap };
  /// Two-for-two swaps enumerate pairs of slots of a device: only with at
  /// most this many slots per device.
  static constexpr int64_t kMaxPairSwapSlots = 64;

  int64_t device(int64_t slot) const { return slotDevice[slot]; }
  int64_t replicas(int64_t e) const { return replicaCount[e]; }
  double piece(int64_t e) const { return expertPiece[e]; }
  /// e's piece with one more replica.
  double newPieceOf(int64_t e) const {
    return pr.load[e] / static_cast<double>(replicas(e) + 1);
  }
  void updatePiece(int64_t e) {
    expertPiece[e] =
        replicas(e) ? pr.load[e] / static_cast<double>(replicas(e)) : 0.0;
  }
  /// Marks (1) or unmarks (0) the devices holding `e` in deviceMark.
  void markDevices(int64_t e, char value) {
    for (int64_t s : slotsOf[e])
      deviceMark[device(s)] = value;
  }

  /// The orders a step searches with (see the file comment).
  void prepare() {
    int64_t logS = 1;
    while ((int64_t(1) << logS) < perDevice)
      ++logS;
    work += pr.slots() * (logS + 2) + pr.experts();
    for (int64_t s = 0; s < pr.slots(); ++s)
      sortedPieces[s] = {piece(slotExpert[s]), s};
    for (int64_t d = 0; d < pr.devices; ++d)
      std::sort(sortedPieces.begin() + d * perDevice,
                sortedPieces.begin() + (d + 1) * perDevice);
    for (int64_t x = 0; x < pr.experts(); ++x)
      byLoadStart[x + 1] = byLoadStart[x] + replicas(x);
    for (int64_t x = 0; x < pr.experts(); ++x) {
      auto begin = byLoad.begin() + byLoadStart[x];
      for (size_t k = 0; k < slotsOf[x].size(); ++k)
        begin[k] = slotsOf[x][k];
      std::sort(begin, begin + replicas(x), [&](int64_t a, int64_t b) {
        return load[device(a)] != load[device(b)]
                   ? load[device(a)] < load[device(b)]
                   : a < b;
      });
    }
  }

  /// Swaps the replica in slot p of the peak device with a lighter one
  /// elsewhere. On device d the swap's score (the higher of the two new
  /// loads) falls and then rises with the incoming piece, so only the
  /// nearest valid pieces on both sides of the crossing are candidates.
  void trySwaps(int64_t star, int64_t p) {
    int64_t x = slotExpert[p];
    double px = piece(x);
    markDevices(x, 1);
    double best = bestScore;
    int64_t bestQ = -1;
    auto consider = [&](double py, int64_t q) {
      double afterStar = load[star] + (py - px);
      double afterD = load[device(q)] + (px - py);
      double s = std::max(afterStar, afterD);
      if (s < best || (s == best && bestQ >= 0 && q < bestQ)) {
        best = s;
        bestQ = q;
      }
    };
    for (int64_t d = 0; d < pr.devices; ++d) {
      if (d == star || deviceMark[d])
        continue;
      auto begin = sortedPieces.begin() + d * perDevice;
      auto end = begin + perDevice;
      work += 2;
      auto crossing = std::partition_point(
          begin, end, [&](const std::pair<double, int64_t> &e) {
            return load[star] + (e.first - px) < load[d] + (px - e.first);
          });
      // Right of the crossing the score is the peak device's new load,
      // rising with the piece: the first valid piece is the best.
      for (auto it = crossing; it != end; ++it) {
        ++work;
        double py = it->first;
        if (py >= px || load[star] + (py - px) >= limit)
          break;
        if (starHas[slotExpert[it->second]] || load[d] - py + px >= limit ||
            load[d] + (px - py) >= limit)
          continue;
        consider(py, it->second);
        for (auto same = std::next(it); same != end && same->first == py;
             ++same)
          if (!starHas[slotExpert[same->second]])
            consider(py, same->second);
        break;
      }
      // Left of it the score is d's new load, falling with the piece.
      for (auto it = crossing; it != begin;) {
        --it;
        ++work;
        double py = it->first;
        if (load[d] - py + px >= limit || load[d] + (px - py) >= limit)
          break;
        if (py >= px || load[star] + (py - px) >= limit ||
            starHas[slotExpert[it->second]])
          continue;
        consider(py, it->second);
        for (auto same = it; same != begin && std::prev(same)->first == py;) {
          --same;
          if (!starHas[slotExpert[same->second]])
            consider(py, same->second);
        }
        break;
      }
    }
    markDevices(x, 0);
    if (bestQ >= 0 && best < bestScore) {
      bestScore = best;
      bestKind = Swap;
      moveA = p;
      moveB = bestQ;
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
        if (starHas[slotExpert[q1]])
          continue;
        for (int64_t q2 = q1 + 1; q2 < dLast; ++q2)
          if (!starHas[slotExpert[q2]])
            theirs.push_back(
                {piece(slotExpert[q1]) + piece(slotExpert[q2]), q1, q2});
      }
      work += static_cast<int64_t>(theirs.size() + mine.size()) * 2;
      if (theirs.empty())
        continue;
      std::sort(theirs.begin(), theirs.end(),
                [](const Pair &x, const Pair &y) { return x.sum < y.sum; });
      for (int64_t q = dFirst; q < dLast; ++q)
        otherHas[slotExpert[q]] = 1;
      double gap = load[star] - load[d];
      for (const Pair &out : mine) {
        if (otherHas[slotExpert[out.a]] || otherHas[slotExpert[out.b]])
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
      for (int64_t q = dFirst; q < dLast; ++q)
        otherHas[slotExpert[q]] = 0;
    }
  }

  /// Slot p on the peak device stops holding x (which keeps other replicas)
  /// and holds a new replica of y instead. Candidates y come by their new
  /// piece, so the search stops at the first whose new piece alone leaves
  /// the peak device too heavy.
  void tryRepurposeHere(int64_t star, int64_t p) {
    int64_t x = slotExpert[p];
    if (replicas(x) < 2)
      return;
    double rx = static_cast<double>(replicas(x));
    double grow = pr.load[x] / (rx - 1) - pr.load[x] / rx;
    xDevices.clear();
    for (int64_t s : slotsOf[x]) {
      if (s == p)
        continue;
      if (load[device(s)] + grow >= limit)
        return;
      xDevices.push_back(device(s));
    }
    std::sort(xDevices.begin(), xDevices.end(), [&](int64_t a, int64_t b) {
      return load[a] > load[b];
    });
    work += 2 * replicas(x);
    markDevices(x, 1);
    double starChange = -pr.load[x] / rx;
    double best = bestScore;
    int64_t bestY = -1;
    for (const auto &[newPiece, y] : newPieces) {
      ++work;
      if (load[star] - pr.load[x] / rx + newPiece >= bestScore)
        break;
      if (y == x || starHas[y])
        continue;
      double ry = static_cast<double>(replicas(y));
      // The touched devices: the peak device, y's (x's too where both are),
      // and x's others.
      double worst = load[star] + (starChange + newPiece);
      bool ok = worst < limit;
      double drop = pr.load[y] / ry - newPiece;
      work += replicas(y);
      for (int64_t s : slotsOf[y]) {
        int64_t d = device(s);
        double after = load[d] + (deviceMark[d] ? grow + -drop : -drop);
        ok &= after < limit;
        worst = std::max(worst, after);
        deviceMark[d] |= 2;
      }
      for (int64_t d : xDevices) {
        ++work;
        if (!(deviceMark[d] & 2)) {
          worst = std::max(worst, load[d] + grow);
          break;
        }
      }
      for (int64_t s : slotsOf[y])
        deviceMark[device(s)] &= 1;
      if (ok && (worst < best || (worst == best && bestY >= 0 && y < bestY))) {
        best = worst;
        bestY = y;
      }
    }
    markDevices(x, 0);
    if (bestY >= 0 && best < bestScore) {
      bestScore = best;
      bestKind = Repurpose;
      moveA = p;
      moveB = bestY;
    }
  }

  /// What re-purposing a slot of x leaves on x's other devices: the two
  /// highest loads and the slot on the device of the highest, how many
  /// reach the old peak and the slot of one of them, and the highest load
  /// left on a device of z without x.
  struct XInfo {
    double top1 = 0, top2 = -std::numeric_limits<double>::infinity();
    int64_t top1Slot = -1, reaching = 0, reachingSlot = -1;
    double zOnly = 0;
  };
  /// x's info when its replicas grow and those on devices marked (bit 1)
  /// also lose `zDrop`.
  XInfo xInfoFor(int64_t x, double zDrop) {
    double rx = static_cast<double>(replicas(x));
    double grow = pr.load[x] / (rx - 1) - pr.load[x] / rx;
    XInfo info;
    work += replicas(x);
    for (int64_t s : slotsOf[x]) {
      int64_t d = device(s);
      double after = load[d] + (deviceMark[d] & 1 ? grow + -zDrop : grow);
      if (after >= limit) {
        ++info.reaching;
        info.reachingSlot = s;
      }
      if (info.top1Slot < 0 || after > info.top1) {
        info.top2 = info.top1;
        info.top1 = after;
        info.top1Slot = s;
      } else if (after > info.top2) {
        info.top2 = after;
      }
    }
    return info;
  }
  /// Per step: every expert's info with no device of z marked.
  void computeBaseInfo() {
    multi.clear();
    for (int64_t x = 0; x < pr.experts(); ++x)
      if (replicas(x) >= 2) {
        multi.push_back(x);
        baseInfo[x] = xInfoFor(x, 0.0);
      }
  }

  /// A slot q elsewhere stops holding x and holds a new replica of the
  /// peak device's expert z, lowering z's piece everywhere. For an expert x
  /// only two slots can be best: on its lightest device that may take z,
  /// and on the device whose growth would be x's highest. An expert's info
  /// is the step's unless it shares a device with z; then it is worked out
  /// again, O(replicas of x), but only when a lower bound on its best move
  /// beats the best so far. O(E + r_z S) per slot p besides.
  void trySplitElsewhere(int64_t star, int64_t p) {
    int64_t z = slotExpert[p];
    if (replicas(z) >= pr.devices)
      return;
    double rz = static_cast<double>(replicas(z));
    double zPiece = pr.load[z] / (rz + 1);
    double zDrop = pr.load[z] / rz - zPiece;
    zDevices.clear();
    for (int64_t s : slotsOf[z])
      zDevices.push_back(device(s));
    std::sort(zDevices.begin(), zDevices.end(), [&](int64_t a, int64_t b) {
      return load[a] > load[b];
    });
    double zTop = load[zDevices.front()] + -zDrop;
    markDevices(z, 1);
    ++stamp;
    work += replicas(z) * (perDevice + 1);
    for (int64_t dz : zDevices)
      for (int64_t s = dz * perDevice, end = s + perDevice; s < end; ++s)
        sharedStamp[slotExpert[s]] = stamp;
    double best = bestScore;
    int64_t bestQ = -1;
    auto eligible = [&](int64_t d) {
      return d != star && !(deviceMark[d] & 1);
    };
    for (int64_t x : multi) {
      ++work;
      if (x == z)
        continue;
      bool shared = sharedStamp[x] == stamp;
      const XInfo *info = &baseInfo[x];
      double zOnly = zTop;
      if (!shared && info->reaching > 1)
        continue;
      // The lightest device that may take z (the first slot among equal
      // loads): its move leaves the least on its own device.
      int64_t lightest = -1;
      for (int64_t k = byLoadStart[x]; k < byLoadStart[x + 1]; ++k) {
        ++work;
        if (eligible(device(byLoad[k]))) {
          lightest = byLoad[k];
          break;
        }
      }
      if (lightest < 0)
        continue;
      double dChange = -pr.load[x] / static_cast<double>(replicas(x)) + zPiece;
      if (load[device(lightest)] - piece(x) + zPiece >= bestScore)
        continue;
      if (shared) {
        // z's smaller piece lowers x's devices that hold it by at most zDrop.
        double bound = std::max(load[device(lightest)] + dChange,
                                info->top2 - zDrop);
        if (bound > best)
          continue;
        exact = xInfoFor(x, zDrop);
        for (int64_t t : slotsOf[x])
          deviceMark[device(t)] |= 2;
        exact.zOnly = -std::numeric_limits<double>::infinity();
        for (int64_t d : zDevices) {
          ++work;
          if (!(deviceMark[d] & 2)) {
            exact.zOnly = load[d] + -zDrop;
            break;
          }
        }
        for (int64_t t : slotsOf[x])
          deviceMark[device(t)] &= 1;
        info = &exact;
        zOnly = exact.zOnly;
        if (info->reaching > 1)
          continue;
      }
      if (zOnly >= limit)
        continue;
      auto consider = [&](int64_t q) {
        int64_t d = device(q);
        if (!eligible(d) || load[d] - piece(x) + zPiece >= bestScore)
          return;
        double dAfter = load[d] + dChange;
        if (dAfter >= limit)
          return;
        double worst =
            std::max(dAfter, info->top1Slot != q ? info->top1 : info->top2);
        worst = std::max(worst, zOnly);
        if (worst < best || (worst == best && bestQ >= 0 && q < bestQ)) {
          best = worst;
          bestQ = q;
        }
      };
      if (info->reaching == 1) {
        consider(info->reachingSlot);
        continue;
      }
      consider(lightest);
      if (info->top1Slot != lightest)
        consider(info->top1Slot);
    }
    markDevices(z, 0);
    if (bestQ >= 0 && best < bestScore) {
      bestScore = best;
      bestKind = Repurpose;
      moveA = bestQ;
      moveB = z;
    }
  }

  /// Accumulates the load changes of re-purposing `slot` to `y` in
  /// `change` (devices listed in `touched`).
  void repurposeDelta(int64_t slot, int64_t y) {
    int64_t x = slotExpert[slot];
    double rx = static_cast<double>(replicas(x));
    double ry = static_cast<double>(replicas(y));
    double grow = pr.load[x] / (rx - 1) - pr.load[x] / rx;
    for (int64_t s : slotsOf[x])
      add(device(s), s == slot ? -pr.load[x] / rx : grow);
    double drop = pr.load[y] / ry - pr.load[y] / (ry + 1);
    for (int64_t s : slotsOf[y])
      add(device(s), -drop);
    add(device(slot), pr.load[y] / (ry + 1));
  }
  void add(int64_t d, double c) {
    if (!changed[d]) {
      changed[d] = 1;
      touched.push_back(d);
      change[d] = c;
    } else {
      change[d] += c;
    }
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
    int64_t slot = moveA, y = moveB;
    repurposeDelta(slot, y);
    for (int64_t d : touched) {
      load[d] += change[d];
      changed[d] = 0;
    }
    touched.clear();
    setSlot(slot, y);
  }
  void swapSlots(int64_t p, int64_t q) {
    int64_t x = slotExpert[p], y = slotExpert[q];
    double px = piece(x), py = piece(y);
    load[device(p)] += py - px;
    load[device(q)] += px - py;
    setSlot(p, y);
    setSlot(q, x);
  }
  void setSlot(int64_t slot, int64_t e) {
    int64_t was = slotExpert[slot];
    for (int64_t changed : {was, e})
      if (replicas(changed) < pr.devices)
        newPieces.erase({newPieceOf(changed), changed});
    std::vector<int64_t> &old = slotsOf[was];
    old.erase(std::find(old.begin(), old.end(), slot));
    --replicaCount[was];
    slotExpert[slot] = e;
    slotsOf[e].push_back(slot);
    ++replicaCount[e];
    updatePiece(was);
    updatePiece(e);
    for (int64_t changed : {was, e})
      if (replicas(changed) < pr.devices)
        newPieces.insert({newPieceOf(changed), changed});
  }

  const Problem &pr;
  std::vector<int64_t> slotExpert;
  int64_t perDevice;
  std::vector<double> load;
  std::vector<std::vector<int64_t>> slotsOf;
  std::vector<int64_t> replicaCount;
  /// Per step: the experts with two or more replicas.
  std::vector<int64_t> multi;
  std::vector<double> expertPiece;
  std::vector<int64_t> slotDevice;
  /// Scratch marks: experts of the peak device, of another device; devices
  /// of one expert; per-device load changes of one move.
  std::vector<char> starHas, otherHas, deviceMark;
  std::vector<double> change;
  std::vector<char> changed;
  std::vector<int64_t> touched;
  /// Devices of one expert, by load.
  std::vector<int64_t> xDevices;
  std::vector<XInfo> baseInfo;
  XInfo exact;
  std::vector<int64_t> zDevices, sharedStamp;
  int64_t stamp = 0;
  /// Per step: each device's (piece, slot) sorted; each expert's slots by
  /// their device's load (expert x at [byLoadStart[x], byLoadStart[x+1])).
  /// Kept up to date: the experts that may gain a replica by their new
  /// piece.
  std::vector<std::pair<double, int64_t>> sortedPieces;
  std::vector<int64_t> byLoadStart, byLoad;
  std::set<std::pair<double, int64_t>> newPieces;
  double limit = 0, bestScore = 0;
  Kind bestKind = None;
  int64_t moveA = 0, moveB = 0;
};
} // namespace

Placement eplb::improveEven(const Problem &problem, Placement placement,
                            double goodEnough, int64_t maxMoves,
                            int64_t workBudget, int64_t *workDone) {
  Search search(problem, placement);
  for (int64_t move = 0; move < maxMoves && search.work < workBudget &&
                         search.step(goodEnough);
       ++move) {
  }
  search.writeBack(placement);
  if (workDone)
    *workDone += search.work;
  return placement;
}

/// Replaces each second replica of an expert on one device by a replica of
/// the expert that leaves the lowest peak (the first such expert; among
/// equal peaks, the one leaving the devices it touches lightest). For one
/// duplicate: the loads without it, O(N), and then per candidate y only the
/// devices holding y, the duplicate's device and the heaviest device holding
/// neither change the peak: O(N + D log D) per duplicate instead of O(E N).
namespace {
/// Second (third, ...) replicas of an expert on one device.
int64_t countDuplicates(const Problem &pr, const Placement &p) {
  std::vector<char> here(pr.experts(), 0);
  int64_t duplicates = 0;
  for (int64_t d = 0; d < pr.devices; ++d) {
    int64_t first = d * pr.perDevice, last = first + pr.perDevice;
    for (int64_t s = first; s < last; ++s)
      duplicates += here[p.phy2log[s]]++ > 0;
    for (int64_t s = first; s < last; ++s)
      here[p.phy2log[s]] = 0;
  }
  return duplicates;
}

/// Separating duplicates one by one looks at every slot per duplicate; past
/// this many steps a cheaper rule does it.
constexpr int64_t kSeparationWork = int64_t(1) << 26;

/// Replaces each duplicate by a replica of the expert with the most load
/// per replica not on the device (DeepSeek's replication rule): O(N + dups
/// (S + log E)).
Placement separateCheaply(const Problem &pr, Placement p) {
  int64_t experts = pr.experts();
  std::vector<int64_t> count = replicaCounts(p, experts);
  std::set<std::pair<double, int64_t>> byPerReplica; // (-w / r, e)
  for (int64_t e = 0; e < experts; ++e)
    byPerReplica.insert({-pr.load[e] / static_cast<double>(count[e]), e});
  std::vector<char> here(experts, 0);
  for (int64_t d = 0; d < pr.devices; ++d) {
    int64_t first = d * pr.perDevice, last = first + pr.perDevice;
    for (int64_t s = first; s < last; ++s) {
      int64_t x = p.phy2log[s];
      if (!here[x]) {
        here[x] = 1;
        continue;
      }
      int64_t best = -1;
      for (const auto &[key, e] : byPerReplica)
        if (!here[e]) {
          best = e;
          break;
        }
      if (best < 0)
        continue; // Cannot happen when slots per device <= experts.
      for (int64_t changed : {x, best})
        byPerReplica.erase(
            {-pr.load[changed] / static_cast<double>(count[changed]),
             changed});
      --count[x];
      ++count[best];
      for (int64_t changed : {x, best})
        byPerReplica.insert(
            {-pr.load[changed] / static_cast<double>(count[changed]),
             changed});
      p.phy2log[s] = best;
      here[best] = 1;
    }
    for (int64_t s = first; s < last; ++s)
      here[p.phy2log[s]] = 0;
  }
  setEvenShares(p, experts);
  return p;
}
} // namespace

Placement eplb::separateDuplicates(const Problem &pr, Placement p) {
  int64_t experts = pr.experts(), devices = pr.devices;
  int64_t duplicates = countDuplicates(pr, p);
  if (duplicates == 0) {
    setEvenShares(p, experts);
    return p;
  }
  if (duplicates > kSeparationWork / (pr.slots() + experts + 2 * devices))
    return separateCheaply(pr, std::move(p));
  auto device = [&](int64_t s) { return s / pr.perDevice; };
  std::vector<int64_t> count = replicaCounts(p, experts);
  std::vector<std::vector<int64_t>> slotsOf = logicalToPhysical(p, experts);
  std::vector<double> base(devices);
  std::vector<int64_t> byLoad(devices);
  std::vector<char> here(experts, 0), mark(devices, 0);
  std::vector<double> change(devices, 0.0);
  for (int64_t d = 0; d < devices; ++d) {
    int64_t first = d * pr.perDevice, last = first + pr.perDevice;
    for (int64_t s = first; s < last; ++s) {
      int64_t x = p.phy2log[s];
      if (std::find(p.phy2log.begin() + first, p.phy2log.begin() + s, x) ==
          p.phy2log.begin() + s)
        continue;
      // Loads with slot s empty and x one replica short.
      --count[x];
      std::fill(base.begin(), base.end(), 0.0);
      for (int64_t t = 0; t < pr.slots(); ++t)
        if (t != s)
          base[device(t)] +=
              pr.load[p.phy2log[t]] /
              static_cast<double>(count[p.phy2log[t]]);
      std::iota(byLoad.begin(), byLoad.end(), 0);
      std::stable_sort(byLoad.begin(), byLoad.end(), [&](int64_t a,
                                                         int64_t b) {
        return base[a] > base[b];
      });
      for (int64_t t = first; t < last; ++t)
        here[p.phy2log[t]] = 1;
      int64_t best = -1;
      double bestPeak = std::numeric_limits<double>::infinity();
      double bestLocal = bestPeak;
      for (int64_t y = 0; y < experts; ++y) {
        if (here[y])
          continue;
        double ry = static_cast<double>(count[y]);
        double newPiece = pr.load[y] / (ry + 1);
        double drop = count[y] > 0 ? pr.load[y] / ry - newPiece : 0.0;
        // The highest load on the devices the choice touches, and the peak.
        double local = base[d] + newPiece;
        for (int64_t t : slotsOf[y]) {
          mark[device(t)] = 1;
          change[device(t)] -= drop;
        }
        for (int64_t t : slotsOf[y])
          if (mark[device(t)] == 1) {
            local = std::max(local, base[device(t)] + change[device(t)]);
            mark[device(t)] = 2;
          }
        double peak = local;
        for (int64_t other : byLoad)
          if (other != d && !mark[other]) {
            peak = std::max(peak, base[other]);
            break;
          }
        for (int64_t t : slotsOf[y]) {
          mark[device(t)] = 0;
          change[device(t)] = 0;
        }
        if (peak < bestPeak || (peak == bestPeak && local < bestLocal)) {
          bestPeak = peak;
          bestLocal = local;
          best = y;
        }
      }
      for (int64_t t = first; t < last; ++t)
        here[p.phy2log[t]] = 0;
      if (best < 0) { // Cannot happen when slots per device <= experts.
        ++count[x];
        continue;
      }
      std::vector<int64_t> &old = slotsOf[x];
      old.erase(std::find(old.begin(), old.end(), s));
      p.phy2log[s] = best;
      ++count[best];
      slotsOf[best].insert(
          std::lower_bound(slotsOf[best].begin(), slotsOf[best].end(), s), s);
    }
  }
  setEvenShares(p, experts);
  return p;
}

/// Moves each second replica of an expert on one device to another device
/// by swapping it with the replica there that leaves the two devices'
/// higher load lowest (replica counts stay; O(N) per duplicate); duplicates
/// no swap can separate go to separateDuplicates().
Placement eplb::separateBySwaps(const Problem &pr, Placement p) {
  int64_t experts = pr.experts(), devices = pr.devices, S = pr.perDevice;
  int64_t duplicates = countDuplicates(pr, p);
  if (duplicates == 0) {
    setEvenShares(p, experts);
    return p;
  }
  if (duplicates > kSeparationWork / (pr.slots() + experts))
    return separateDuplicates(pr, std::move(p));
  std::vector<int64_t> count = replicaCounts(p, experts);
  std::vector<double> piece(experts, 0.0), load(devices, 0.0);
  for (int64_t e = 0; e < experts; ++e)
    if (count[e] > 0)
      piece[e] = pr.load[e] / static_cast<double>(count[e]);
  for (int64_t s = 0; s < pr.slots(); ++s)
    load[s / S] += piece[p.phy2log[s]];
  // holds[d * ...] is too big: mark the devices of x and the experts of d.
  std::vector<std::vector<int64_t>> slotsOf = logicalToPhysical(p, experts);
  std::vector<char> xDevice(devices, 0), here(experts, 0);
  bool left = false;
  for (int64_t d = 0; d < devices; ++d) {
    int64_t first = d * S, last = first + S;
    for (int64_t s = first; s < last; ++s) {
      int64_t x = p.phy2log[s];
      if (std::find(p.phy2log.begin() + first, p.phy2log.begin() + s, x) ==
          p.phy2log.begin() + s)
        continue;
      for (int64_t t : slotsOf[x])
        xDevice[t / S] = 1;
      for (int64_t t = first; t < last; ++t)
        here[p.phy2log[t]] = 1;
      double px = piece[x], best = std::numeric_limits<double>::infinity();
      int64_t bestQ = -1;
      for (int64_t q = 0; q < pr.slots(); ++q) {
        int64_t other = q / S, y = p.phy2log[q];
        if (xDevice[other] || here[y])
          continue;
        double py = piece[y];
        double score = std::max(load[d] + (py - px), load[other] + (px - py));
        if (score < best) {
          best = score;
          bestQ = q;
        }
      }
      for (int64_t t : slotsOf[x])
        xDevice[t / S] = 0;
      for (int64_t t = first; t < last; ++t)
        here[p.phy2log[t]] = 0;
      if (bestQ < 0) {
        left = true;
        continue;
      }
      int64_t y = p.phy2log[bestQ], other = bestQ / S;
      load[d] += piece[y] - px;
      load[other] += px - piece[y];
      std::replace(slotsOf[x].begin(), slotsOf[x].end(), s, bestQ);
      std::replace(slotsOf[y].begin(), slotsOf[y].end(), bestQ, s);
      std::swap(p.phy2log[s], p.phy2log[bestQ]);
    }
  }
  setEvenShares(p, experts);
  return left ? separateDuplicates(pr, std::move(p)) : p;
}
