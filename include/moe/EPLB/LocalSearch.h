//===- LocalSearch.h - Improve an even-split placement -*- C++ -*-===//
#ifndef MOE_EPLB_LOCALSEARCH_H
#define MOE_EPLB_LOCALSEARCH_H

#include "moe/EPLB/Placement.h"

namespace mlir::moe::eplb {

/// Lowers the peak of an even-split placement (no expert twice on a device)
/// by moves that each lower the most loaded device and keep every device
/// they touch below the old peak: swapping two replicas between devices,
/// re-purposing a replica of an expert with several to another expert on the
/// peak device, or to an expert of the peak device elsewhere (splitting it
/// further), or, when none of these helps, two replicas for two. Stops at a
/// local optimum, at a peak of `goodEnough` or after `maxMoves` moves. The
/// result keeps every slot, every expert replicated and even shares.
Placement improveEven(const Problem &problem, Placement placement,
                      double goodEnough = 0, int64_t maxMoves = 100000);

/// Makes a placement follow the rule that a device holds an expert once (as
/// DeepSeek's may not): each second replica of an expert on a device becomes
/// a replica of the expert that leaves the lowest peak for `problem`.
Placement separateDuplicates(const Problem &problem, Placement placement);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_LOCALSEARCH_H
