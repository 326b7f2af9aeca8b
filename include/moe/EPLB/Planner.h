//===- Planner.h - Plan one layer's expert placement -*- C++ -*-===//
#ifndef MOE_EPLB_PLANNER_H
#define MOE_EPLB_PLANNER_H

#include "moe/EPLB/FuturePacking.h"
#include "moe/EPLB/Placement.h"

namespace mlir::moe::eplb {

/// Which balancer plans.
enum class Algorithm {
  DeepSeek, ///< deepseek-ai/EPLB, the baseline.
  Ours,     ///< Joint replica counts and packing, never worse than DeepSeek.
};

/// What ours plans for (even shares; uneven shares always fit the sample).
enum class Objective {
  /// The traffic that comes next, like the sample but not it: replicas on
  /// the hottest experts, devices whose pieces spread alike
  /// (FuturePacking.h), within 0.05% of the bound on the sample.
  Future,
  /// The sample itself: the least peak on it, proven optimal when small.
  Sample,
};

/// How to plan.
struct PlanOptions {
  Algorithm algorithm = Algorithm::Ours;
  Objective objective = Objective::Future;
  /// Objective::Future keeps its plan unless the sample objective's peak on
  /// the sample is lower by more than this fraction (small layers, where
  /// exact fitting fills the gaps: FlashLB's example, 232 against 196.67).
  /// At 1% or 2% layers of 2 slots per device took fitted plans that were
  /// worse out of sample (EP144: +0.7% and +0.1% against DeepSeek's), at
  /// 5% +0.01%: only layers of at most exactMaxExperts experts and 64
  /// devices (the exact search's size) take them.
  double futureSampleCost = 0.05;
  /// Objective::Future's own options (its workBudget is searchWork's).
  FutureOptions future;
  /// Replicas may take uneven shares of their expert's tokens.
  bool shares = false;
  /// With shares, each replica takes at least this fraction of an even
  /// share: a replica placed only to take nothing wastes its memory, and
  /// the next traffic may want it.
  double minShare = 0.1;
  /// Branch-and-bound nodes for instances with at most `exactMaxExperts`
  /// experts per node (0 turns the exact search off).
  int64_t exactBudget = 2000000;
  int64_t exactMaxExperts = 16;
  /// Elementary steps the local searches of the layer may take
  /// (kLocalSearchWork); node-aware planning shares it among the nodes and
  /// the splits of the groups it tries, as it shares exactBudget.
  int64_t searchWork = int64_t(1) << 26;
};

/// A planned layer.
struct LayerPlan {
  Placement placement;
  double peak = 0;      ///< Predicted peak device load.
  double mean = 0;      ///< Mean device load.
  bool optimal = false; ///< Proven optimal for its algorithm's rules.
  /// Elementary local-search steps spent (at most PlanOptions::searchWork,
  /// twice that with shares: the ring placement has its own).
  int64_t searchWork = 0;
  double ratio() const { return mean > 0 ? peak / mean : 1.0; }
};

/// Ours on devices without nodes. `start`, if given, is a placement to beat
/// (with even shares); with Objective::Sample the result's peak is never
/// above a valid start's.
LayerPlan planFlat(const Problem &problem, const Placement *start,
                   const PlanOptions &options);

/// Plans one layer for `load` (finite and >= 0 with a finite sum, as
/// checkLoads() ensures for inputs) on `topology` (checkTopology() is ""):
/// DeepSeek's placement, or ours, node-aware when topology.hierarchical()
/// (each node gets whole expert groups; ours tries DeepSeek's group-to-node
/// packing and its own and keeps the better). Ours starts from DeepSeek's placement, so its peak is at
/// most DeepSeek's whenever DeepSeek's is valid (DeepSeek may put two
/// replicas of an expert on one device; ours never does). `spread` informs
/// ours with the future objective on devices without nodes (Problem::spread).
LayerPlan planLayer(const std::vector<double> &load, const Topology &topology,
                    const PlanOptions &options, const LoadSpread &spread = {});

/// A lower bound on the peak of any placement of `load` on `topology` under
/// the rules of `shares`: the mean device load, the least possible largest
/// piece (even shares), and node-aware, the best split of the groups over
/// the nodes when there are few enough splits to try them all.
double peakLowerBound(const std::vector<double> &load, const Topology &topology,
                      bool shares);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_PLANNER_H
