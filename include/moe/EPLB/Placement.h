//===- Placement.h - Expert placement on devices and its load -*- C++ -*-===//
#ifndef MOE_EPLB_PLACEMENT_H
#define MOE_EPLB_PLACEMENT_H

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::moe::eplb {

/// A cluster: `slots` physical expert slots spread evenly over `devices`
/// devices (slot p lives on device p / slotsPerDevice()), the devices spread
/// evenly over `nodes` nodes. The logical experts fall into `groups` groups of
/// consecutive ids; node-aware placement keeps a group on one node.
struct Topology {
  int64_t slots = 0;
  int64_t devices = 0;
  int64_t nodes = 1;
  int64_t groups = 1;

  int64_t slotsPerDevice() const { return slots / devices; }
  int64_t devicesPerNode() const { return devices / nodes; }
  /// DeepSeek's rule: place node-aware when the groups split over the nodes.
  bool hierarchical() const { return nodes > 1 && groups % nodes == 0; }
};

/// The largest load (tokens of one expert in one layer and window) the
/// planner accepts: 2^53, the largest integer a double holds exactly. With at
/// most limits::kMaxExperts experts and kMaxLayers windows every sum,
/// square and ratio the planner forms stays far inside the double range, so
/// every number it writes is finite.
constexpr double kMaxLoad = 9007199254740992.0;

/// Returns why `topology` cannot hold `experts` logical experts, or "":
/// every size within its limit (moe/Support/Limits.h: experts and slots at
/// most kMaxExperts, devices at most kMaxRanks, groups at most kMaxTopK),
/// slots a multiple of devices, at most one replica of an expert per device
/// (also inside a node when the placement is node-aware). Messages name the
/// option: "--slots (6) must be at least ...".
std::string checkTopology(const Topology &topology, int64_t experts);

/// Returns why `load` cannot be planned, or "": each load finite, >= 0 and
/// at most kMaxLoad. `path` prefixes the message ("$[3][7]: ...").
std::string checkLoads(const std::vector<double> &load,
                       const std::string &path = "load");

/// What several windows of past loads say about the next load beyond the
/// load a plan fits; read by the future objective only (FuturePacking.h).
struct LoadSpread {
  /// The load whose water-filling gives the replica counts (empty: the
  /// load itself).
  std::vector<double> replicaLoad;
  /// Each expert's variance of its next load beyond the drift in proportion
  /// to its load that the future objective assumes (empty: none).
  std::vector<double> variance;
};

/// One layer to place without nodes: expert loads on `devices` devices of
/// `perDevice` slots each.
struct Problem {
  std::vector<double> load;
  int64_t devices = 0;
  int64_t perDevice = 0;
  LoadSpread spread;
  /// The experts fall into this many groups of consecutive ids (1: none);
  /// the future objective takes the next loads of a group's experts to move
  /// together.
  int64_t groups = 1;

  int64_t experts() const { return static_cast<int64_t>(load.size()); }
  int64_t slots() const { return devices * perDevice; }
  double total() const;
};

/// One layer's placement: physical slot p holds a replica of logical expert
/// phy2log[p] that takes the fraction share[p] of that expert's tokens.
struct Placement {
  std::vector<int64_t> phy2log;
  std::vector<double> share;
};

/// Number of replicas of each logical expert.
std::vector<int64_t> replicaCounts(const Placement &placement, int64_t experts);

/// The physical slots of each logical expert, in slot order.
std::vector<std::vector<int64_t>> logicalToPhysical(const Placement &placement,
                                                    int64_t experts);

/// Sets every share to 1 / (replicas of its expert): the even split.
void setEvenShares(Placement &placement, int64_t experts);

/// Tokens each device processes when the experts see `load`.
std::vector<double> deviceLoads(const Placement &placement,
                                const std::vector<double> &load,
                                int64_t devices);

/// The most loaded device's load.
double peakLoad(const Placement &placement, const std::vector<double> &load,
                int64_t devices);

/// Peak device load over the mean device load (1 is perfect balance; 1 when
/// there is no load at all).
double peakOverAverage(const Placement &placement,
                       const std::vector<double> &load, int64_t devices);

/// `peak` over the mean `total / devices`, finite for any finite peak and
/// total (1 when total <= 0): the mean of tiny loads may underflow to 0, and
/// then the ratio is taken against the total (and is at least 1).
double ratioToMean(double peak, double total, int64_t devices);

/// Returns what is wrong with `placement` for `experts` experts on
/// `topology`, or "": a slot per physical slot, every expert with a replica,
/// no device holding two replicas of one expert, shares in [0, 1] summing to
/// 1 per expert. DeepSeek's baseline may put two replicas of an expert on one
/// device: `allowSameDevice` accepts that.
std::string checkPlacement(const Placement &placement, int64_t experts,
                           const Topology &topology,
                           bool allowSameDevice = false);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_PLACEMENT_H
