//===- ExactSearch.h - Branch and bound for small instances -*- C++ -*-===//
#ifndef MOE_EPLB_EXACTSEARCH_H
#define MOE_EPLB_EXACTSEARCH_H

#include "moe/EPLB/Placement.h"

#include <optional>

namespace mlir::moe::eplb {

/// What a bounded exact search found.
struct ExactResult {
  /// The best placement with a peak below the given upper bound, if any.
  std::optional<Placement> placement;
  /// The search finished within its node budget: nothing beats the result
  /// (or the upper bound, when no placement was found).
  bool complete = false;
};

/// Branch and bound over replica counts and devices, heaviest expert first,
/// with even shares. Devices with the same load and free slots are
/// interchangeable for the experts still to place, so only one of each kind
/// is branched on.
ExactResult exactEven(const Problem &problem, double upper, int64_t nodeBudget);

/// Branch and bound over which devices hold each expert's replicas, with the
/// best uneven shares; a partial placement is pruned by its own optimal
/// peak (a lower bound for every completion). Empty devices are
/// interchangeable. Stops early at the mean device load.
ExactResult exactShares(const Problem &problem, double upper,
                        int64_t nodeBudget);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_EXACTSEARCH_H
