//===- FuturePacking.h - Even placements for the traffic that comes next -*- C++ -*-===//
//
// A placement is planned on past loads and serves future ones, which differ
// from them expert by expert: between the SGLang traces of DeepSeek-V3 each
// expert's share moves by a factor of about exp(N(0, 0.3-0.5)), at every
// load level. A device's future load then spreads with the squares of its
// pieces (sum over its replicas of (load / replicas)^2), so fitting the
// sample exactly buys nothing: what lasts is replicas on the hottest experts
// and devices whose pieces spread alike.
//
// The experts of one group (DeepSeek-V3: 8 groups of 32, its group-limited
// routing picks 4 groups per token) move together: their next loads
// correlate by about 0.2, against 0 for experts of different groups. A
// device holding several pieces of one group spreads more, so with the
// groups given (Problem::groups) the swaps lower a smooth bound on the
// expected peak over all devices, each device's variance counting its
// same-group pairs.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_EPLB_FUTUREPACKING_H
#define MOE_EPLB_FUTUREPACKING_H

#include "moe/EPLB/Placement.h"

#include <optional>

namespace mlir::moe::eplb {

/// What the swaps lower.
enum class FutureObjective {
  /// ExpectedPeak when the experts fall into groups (Problem::groups > 1),
  /// else PeakScore: without the groups' correlation the sum did no better
  /// than the largest score out of sample.
  Auto,
  /// The largest  load + spread * sqrt(variance)  over the devices.
  PeakScore,
  /// A smooth bound on the expected largest next load over the devices,
  /// every device counting, the hotter ones exponentially more:
  /// sum over devices of exp(x_d), x_d = (load_d / mean - 1) / tau +
  /// drift^2 variance_d / (2 tau^2 mean^2), tau = tauScale s / sqrt(2 log
  /// D) for a typical device's deviation s (FuturePacking.cpp).
  ExpectedPeak,
};

struct FutureOptions {
  FutureObjective objective = FutureObjective::Auto;
  /// PeakScore: weight of a device's spread, sqrt(its variance), against
  /// its sample load (chosen on the four shared traces, plan on one, run on
  /// another; 0.3 and 1.0 were worse).
  double spread = 0.6;
  /// ExpectedPeak: the standard deviation of a piece's next load relative
  /// to its load (measured between the SGLang traces: 0.33-0.39, weighted
  /// by load squared; 0.25 and 0.5 gave the same out of sample).
  double drift = 0.35;
  /// The correlation between the next loads of two experts of one group
  /// (Problem::groups), which adds 2 * correlation * (product of their
  /// pieces) to a device's variance (measured between the SGLang traces of
  /// DeepSeek-V3, 8 groups of 32 experts: 0.19-0.22, weighted by load;
  /// -0.005 for groups drawn at random).
  double groupCorrelation = 0.2;
  /// ExpectedPeak: tau is this times the value that makes the bound
  /// tightest for alike devices (smaller: closer to the largest term).
  /// Chosen on the four shared traces, where 1 lost at EP64 through two
  /// layers (+0.05% against DeepSeek, 0.5: -1.2%); on the twelve traces of
  /// the SGLang repository 0.5, 1 and 2 gave -1.2% to -1.6% at EP32-EP72.
  double tauScale = 0.5;
  /// ExpectedPeak: swaps that lower the sum by less than this fraction are
  /// not taken.
  double minGain = 1e-6;
  /// Every device's sample load may pass the lower bound by this fraction.
  double slack = 5e-4;
  /// Candidate swaps looked at, at most.
  int64_t workBudget = int64_t(1) << 26;
};

/// An even-split placement for traffic like `problem.load`: each extra slot
/// to the expert with the largest load per replica (never more replicas than
/// devices; the load per replica of `problem.spread.replicaLoad` where
/// given), pieces heaviest first onto the lightest devices with room
/// (distinct devices for one expert's pieces), then swaps of two pieces that
/// lower the objective (FutureObjective; plus a large penalty on sample load
/// above the bound's slack) until none does. A device's variance is the sum
/// over its pieces of (load / replicas)^2 + variance / replicas^2
/// (`problem.spread.variance`) plus groupCorrelation times twice the
/// products of its pieces of one group. O(N log D) before the swaps, O(S N)
/// per swap (PeakScore) and per device searched from (ExpectedPeak, which
/// searches from the devices in decreasing order of their terms until one
/// has a swap). Adds the candidates looked at to `*workDone`. None when the
/// packing runs out of distinct devices for an expert's pieces (a few slots
/// per device and replicas of cold experts).
std::optional<Placement> planForFuture(const Problem &problem,
                                       const FutureOptions &options,
                                       int64_t *workDone = nullptr);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_FUTUREPACKING_H
