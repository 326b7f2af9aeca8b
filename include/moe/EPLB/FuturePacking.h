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
//===----------------------------------------------------------------------===//
#ifndef MOE_EPLB_FUTUREPACKING_H
#define MOE_EPLB_FUTUREPACKING_H

#include "moe/EPLB/Placement.h"

#include <optional>

namespace mlir::moe::eplb {

struct FutureOptions {
  /// Weight of a device's spread, sqrt(sum of its pieces' squares), against
  /// its sample load (chosen on the four shared traces, plan on one, run on
  /// another; 0.3 and 1.0 were worse).
  double spread = 0.6;
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
/// lower the largest  sample load + spread * spread of a device  (plus a
/// large penalty on sample load above the bound's slack) until none does.
/// A device's spread is the square root of the sum over its pieces of
/// (load / replicas)^2 + variance / replicas^2 (`problem.spread.variance`).
/// O(N log D) before the swaps, O(S N) per swap. Adds the candidates looked
/// at to `*workDone`. None when the packing runs out of distinct devices for
/// an expert's pieces (a few slots per device and replicas of cold experts).
std::optional<Placement> planForFuture(const Problem &problem,
                                       const FutureOptions &options,
                                       int64_t *workDone = nullptr);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_FUTUREPACKING_H
