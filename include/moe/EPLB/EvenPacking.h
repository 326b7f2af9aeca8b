//===- EvenPacking.h - Replica counts and packing for a peak --*- C++ -*-===//
//
// With each expert's tokens split evenly over its replicas, a target peak T
// fixes the fewest replicas an expert needs (ceil(load / T)); the packer
// then decides replica counts and devices together, heaviest expert first,
// splitting an expert further when its pieces do not fit. Bisection on T
// finds the smallest target the packer meets.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_EPLB_EVENPACKING_H
#define MOE_EPLB_EVENPACKING_H

#include "moe/EPLB/Placement.h"

#include <optional>

namespace mlir::moe::eplb {

/// Which feasible devices take an expert's pieces.
enum class FitRule {
  Best,  ///< The fullest devices (tightest fit).
  Worst, ///< The emptiest devices.
};

/// Replica counts that give each slot beyond one per expert to the expert
/// with the largest load per replica not yet on every device (the first
/// expert among equal ones): the least possible largest piece. O(N log E).
std::vector<int64_t> waterFillingCounts(const Problem &problem);

/// Lower bound on the peak of any even-split placement: the mean device load
/// and the least possible largest piece (load / replicas, replicas <= devices).
double evenLowerBound(const Problem &problem);

/// An even-split placement with every slot filled and no device holding two
/// replicas of an expert, built for peak `target`; its real peak may exceed
/// the target when the last free slots cannot be filled below it. None when
/// the experts do not fit. O(N log N + F (C log E + S)) for F free slots
/// filled at the end and C distinct replica counts.
std::optional<Placement> packAtTarget(const Problem &problem, double target,
                                      FitRule rule);

/// Bisects the target between evenLowerBound() and `upper` with both fit
/// rules (at most 2 (1 + iterations) packer runs, plus 2 per doubling of
/// the target, O(log devices), when `upper` is infinite); returns the
/// placement with the lowest peak found below `upper`.
std::optional<Placement> bisectTarget(const Problem &problem, double upper,
                                      int iterations = 40);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_EVENPACKING_H
