//===- Redeploy.h - Decide whether a new placement pays off -*- C++ -*-===//
#ifndef MOE_EPLB_REDEPLOY_H
#define MOE_EPLB_REDEPLOY_H

#include "moe/EPLB/Planner.h"

namespace mlir::moe::eplb {

/// Number of slots whose expert differs between two placements: the
/// replicas a redeploy has to load.
int64_t movedReplicas(const Placement &from, const Placement &to);

/// Relabels the devices of `proposed` and orders each device's slots so that
/// as many replicas as possible stay in the slot they hold in `current`
/// (maximum-overlap device matching). Node-aware, devices move only inside
/// a node and whole nodes are matched. Loads and shares are unchanged.
Placement alignToCurrent(const Placement &proposed, const Placement &current,
                         const Topology &topology);

/// What to do with one layer.
struct RedeployDecision {
  bool redeploy = false;
  double currentRatio = 1;   ///< Current placement and shares on the new load.
  double plannedRatio = 1;   ///< The best new placement on the new load.
  int64_t movedReplicas = 0; ///< Replicas the new placement moves.
  Placement placement;       ///< What to run: the new placement or current.
  double gain() const { return currentRatio - plannedRatio; }
};

/// Plans `load` afresh (aligned to `current`) and, without node-awareness,
/// also improves `current` itself by local search (few moves); with shares,
/// `current` with re-optimised shares moves nothing. The candidate with the
/// lowest peak/average wins, or the one with fewest moves among those within
/// threshold / 4 of it. Redeploys when it lowers peak/average by at least
/// `threshold` (absolute, e.g. 0.05 for 1.15 -> 1.10).
RedeployDecision decideRedeploy(const Placement &current,
                                const std::vector<double> &load,
                                const Topology &topology,
                                const PlanOptions &options, double threshold);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_REDEPLOY_H
