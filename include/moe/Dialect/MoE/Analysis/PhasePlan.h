//===- PhasePlan.h - prefill and decode variants of a layer -----*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_ANALYSIS_PHASEPLAN_H
#define MOE_DIALECT_MOE_ANALYSIS_PHASEPLAN_H

#include "moe/Dialect/MoE/Analysis/ChunkPlan.h"

#include <cstdint>
#include <optional>

namespace mlir::moe {

/// The `phase` argument of an entry made by moe-specialize-phase.
enum class PhaseArg : int32_t { Auto = 0, Prefill = 1, Decode = 2 };

/// The decision of moe-specialize-phase for one layer.
struct PhasePlan {
  /// Most tokens per rank of the decode variant: the threshold, but never
  /// more than the layer's own maximum.
  int64_t decodeMaxTokens = 0;
};
PhasePlan planPhases(int64_t threshold, std::optional<int64_t> layerMaxTokens);

/// True when the entry runs the decode variant: by the explicit argument, or
/// (Auto) when the most tokens any rank of the group holds fits the decode
/// variant. The compiled entry computes exactly this.
bool runsDecode(PhaseArg phase, int64_t mostTokensInGroup, int64_t decodeMaxTokens);

/// The static sizes of the decode layout on one rank.
struct DecodeLayout {
  int64_t slotsPerPeer = 0;      ///< Rows each rank sends each rank.
  int64_t receivedRows = 0;      ///< ep * slots (1 rank: the tokens).
  int64_t capacityPerExpert = 0; ///< Rows each local expert owns.
  int64_t maskedRows = 0;        ///< local experts * capacity.
};
/// Nothing when a size overflows int64_t or an input is out of range
/// (decodeMaxTokens < 0, ep < 1, experts < 0).
std::optional<DecodeLayout> decodeLayout(const LayerShape &shape,
                                         int64_t decodeMaxTokens);

/// Why the sizes planned from `maxTokens` tokens per rank do not fit, or
/// nothing. The local dispatch numbers rows and (row, choice) pairs in i32,
/// so R * k received choices (R = ep * maxTokens, or maxTokens on one rank:
/// the prefill capacity and the decode layout's rows) and the decode
/// layout's local experts x R masked rows are at most 2^31 - 1; every
/// dispatch workspace of both layouts (WorkspacePlan.h) is at most 2^62
/// bytes. `shape.experts` counts the expert slots of all ranks (physical
/// slots with a placement). The layer verifier checks it (layer_c11), so
/// the planners after it compute in range.
std::optional<std::string> checkPlannedSizes(const LayerShape &shape,
                                             int64_t maxTokens);

/// Bytes one rank puts on the wire for the dispatch of `tokens` tokens
/// (rows of `rowBytes`), and what that is per token. Prefill sends one row
/// per (token, distinct destination rank): at most min(top-k, ep) per
/// token. Decode always sends ep blocks of `slots` rows, whatever the count.
/// On overflow (or negative sizes) `valid` is false and both values 0.
struct WireBytes {
  int64_t perStepMax = 0;
  double perTokenMax = 0;
  bool valid = true;
};
WireBytes prefillDispatchBytes(const LayerShape &shape, int64_t rowBytes, int64_t tokens);
WireBytes decodeDispatchBytes(const LayerShape &shape, int64_t rowBytes, int64_t slots,
                              int64_t tokens);

} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_ANALYSIS_PHASEPLAN_H
