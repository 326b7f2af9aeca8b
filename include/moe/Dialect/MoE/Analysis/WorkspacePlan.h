//===- WorkspacePlan.h - static sizes of the dispatch workspaces -*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_ANALYSIS_WORKSPACEPLAN_H
#define MOE_DIALECT_MOE_ANALYSIS_WORKSPACEPLAN_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir::moe {

/// The declared maxima of one expert-parallel dispatch.
struct DispatchBounds {
  int64_t ep = 1;
  int64_t maxTokens = 0; ///< Per rank and per call (a chunk when chunked).
  int64_t topK = 0;
  int64_t hidden = 0;
  int64_t elementBytes = 4;
  int64_t wireActivationBytes = 0; ///< Per row: H * element, or FP8 + scales.
  int64_t capacity = 0;            ///< Rows a rank may receive.
  int64_t slots = 0;               ///< > 0: decode layout.
  /// FP8 rows go to the experts as codes plus f32 scales (groups per row)
  /// instead of dequantized activations.
  int64_t codeGroups = 0;
};

/// One runtime workspace: its name (as the runtime's counters call it), how
/// its size follows from the maxima, and the size.
struct Workspace {
  std::string name;
  std::string formula;
  int64_t bytes = 0;
};

/// Why `bounds` cannot be planned, or nothing: ep, top-k, hidden size and
/// max tokens within moe/Support/Limits.h, capacity at most
/// kMaxTokens * kMaxRanks rows, slots at most kMaxTokens, element bytes
/// 1..8, and every workspace size representable (planWorkspaces not empty).
std::optional<std::string> checkDispatchBounds(const DispatchBounds &bounds);

/// Bytes of one dispatched row: activations, then top-k int16 local expert
/// ids and f32 weights. The three functions below return -1 when a size
/// overflows int64_t or is negative (checked arithmetic).
int64_t dispatchRowBytes(const DispatchBounds &bounds);
/// The all-gather exchange's row: activations, then top-k i32 global ids
/// and f32 weights, as the layer's buffers hold them (-1 on overflow).
int64_t gatherRowBytes(const DispatchBounds &bounds);
/// Rows a rank sends at most: every token to min(top-k, ep) ranks (prefill),
/// or ep blocks of `slots` rows (decode).
int64_t plannedSendRows(const DispatchBounds &bounds);
/// Rows a rank receives at most: the capacity, or ep * slots.
int64_t plannedReceiveRows(const DispatchBounds &bounds);

/// dispatch.send, dispatch.recv, expert.rows and combine.recv, in the order
/// moert.h's plan takes them. Empty when a size overflows int64_t.
std::vector<Workspace> planWorkspaces(const DispatchBounds &bounds);

} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_ANALYSIS_WORKSPACEPLAN_H
