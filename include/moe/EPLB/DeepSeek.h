//===- DeepSeek.h - DeepSeek's EPLB, the baseline balancer -*- C++ -*-===//
//
// A reimplementation of deepseek-ai/EPLB (eplb.py) that reproduces its output
// exactly, ties included: float32 arithmetic, a stable descending sort, the
// first index among equal maxima and the first pack among equally light ones.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_EPLB_DEEPSEEK_H
#define MOE_EPLB_DEEPSEEK_H

#include "moe/EPLB/Placement.h"

namespace mlir::moe::eplb {

/// Packs items into `packs` packs of equally many items, heaviest item first
/// into the lightest pack that has room (eplb.py balanced_packing; a heap of
/// the packs with room, O(n log n)). Returns each item's pack and its rank
/// inside the pack.
void balancedPacking(const std::vector<float> &weight, int64_t packs,
                     std::vector<int64_t> &packIndex,
                     std::vector<int64_t> &rankInPack);

/// Replicas from eplb.py replicate_experts: each extra slot goes to the expert
/// with the highest load per replica.
struct Replication {
  std::vector<int64_t> phy2log; ///< Expert of each physical replica.
  std::vector<int64_t> rank;    ///< Which replica of its expert it is.
  std::vector<int64_t> count;   ///< Replicas per expert.
};

/// Replicates `weight.size()` experts onto `physical` replicas (a heap,
/// O(physical log experts)).
Replication replicateExperts(const std::vector<float> &weight,
                             int64_t physical);

/// DeepSeek's placement of one layer with even shares: hierarchical (groups
/// to nodes, replicas within nodes, replicas to devices) when
/// `topology.groups` is a multiple of `topology.nodes`, global otherwise.
/// `rank` (optional) receives each slot's replica rank.
Placement deepseekPlacement(const std::vector<double> &load,
                            const Topology &topology,
                            std::vector<int64_t> *rank = nullptr);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_DEEPSEEK_H
