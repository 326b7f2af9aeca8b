//===- Pairing.h - Replica counts with two slots per device --*- C++ -*-===//
//
// With two slots per device and even shares, the best devices for given
// replica counts pair the largest piece with the smallest, the second
// largest with the second smallest, and so on; so only the replica counts
// are left to search.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_EPLB_PAIRING_H
#define MOE_EPLB_PAIRING_H

#include "moe/EPLB/Placement.h"

namespace mlir::moe::eplb {

/// The peak of pairing sorted pieces outside in, for these replica counts
/// (no check that a pair holds two replicas of one expert).
double pairedPeak(const std::vector<double> &load,
                  const std::vector<int64_t> &counts);

/// Donors improvePairCounts() tries per move.
constexpr int64_t kMaxDonors = 32;

/// Moves replicas one at a time from an expert with several (the kMaxDonors
/// whose pieces grow least) to one of the `receivers` experts with the
/// largest or the smallest pieces while that lowers pairedPeak(); returns
/// the counts. A move costs O(kMaxDonors * receivers * E); the search stops
/// after `maxMoves` moves or when the next move would pass `workBudget`
/// such steps (about 0.05 s).
std::vector<int64_t> improvePairCounts(const Problem &problem,
                                       std::vector<int64_t> counts,
                                       int64_t receivers = 8,
                                       int64_t maxMoves = 1000,
                                       int64_t workBudget = int64_t(1) << 25);

/// Pairs the pieces outside in (two per device), then swaps partners of
/// nearby pairs (within 1024) where a pair holds one expert twice; a pair
/// left so makes the placement invalid (callers check).
Placement pairPlacement(const Problem &problem,
                        const std::vector<int64_t> &counts);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_PAIRING_H
