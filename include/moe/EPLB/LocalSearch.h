//===- LocalSearch.h - Improve an even-split placement -*- C++ -*-===//
#ifndef MOE_EPLB_LOCALSEARCH_H
#define MOE_EPLB_LOCALSEARCH_H

#include "moe/EPLB/Placement.h"

namespace mlir::moe::eplb {

/// Elementary steps (candidates looked at, replicas visited) the local
/// searches of one layer's plan do at most: a few tenths of a second. Layers
/// of a few hundred experts stop at a local optimum long before.
constexpr int64_t kLocalSearchWork = int64_t(1) << 26;

/// Lowers the peak of an even-split placement (no expert twice on a device)
/// by moves that each lower the most loaded device and keep every device
/// they touch below the old peak: swapping two replicas between devices,
/// re-purposing a replica of an expert with several to another expert on the
/// peak device, or to an expert of the peak device elsewhere (splitting it
/// further), or, when none of these helps, two replicas for two. Stops at a
/// local optimum, at a peak of `goodEnough`, after `maxMoves` moves or once
/// it has done `workBudget` elementary steps (a move costs about
/// N log N + S (E + D log S + r S) of them, r the replicas of an expert of
/// the peak device). Adds the steps it did to `*workDone`. The result keeps
/// every slot, every expert replicated and even shares.
Placement improveEven(const Problem &problem, Placement placement,
                      double goodEnough = 0, int64_t maxMoves = 100000,
                      int64_t workBudget = kLocalSearchWork,
                      int64_t *workDone = nullptr);

/// Makes a placement follow the rule that a device holds an expert once (as
/// DeepSeek's may not): each second replica of an expert on a device becomes
/// a replica of the expert that leaves the lowest peak for `problem`.
Placement separateDuplicates(const Problem &problem, Placement placement);

/// Makes a placement follow the same rule keeping its replica counts where
/// it can: each second replica of an expert on a device trades places with
/// the replica on a device without that expert that leaves the two
/// devices' higher load lowest; separateDuplicates() for the rest.
Placement separateBySwaps(const Problem &problem, Placement placement);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_LOCALSEARCH_H
