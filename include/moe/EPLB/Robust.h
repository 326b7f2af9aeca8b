//===- Robust.h - Planning over several time windows -*- C++ -*-===//
#ifndef MOE_EPLB_ROBUST_H
#define MOE_EPLB_ROBUST_H

#include "moe/EPLB/Planner.h"

namespace mlir::moe::eplb {

/// Which load a multi-window plan is made for.
enum class Robust {
  Mean,    ///< Per-expert mean over the windows.
  Max,     ///< Per-expert maximum over the windows.
  MeanStd, ///< Per-expert mean + k * standard deviation.
  Worst,   ///< The candidate plan whose worst window is best.
  /// The next window: windows scaled to one total; replica counts for mean
  /// + 1 standard deviation, pieces packed for mean + 0.5 standard
  /// deviations, each device's spread counting twice the windows' variance
  /// of its experts (FuturePacking.h). Ours with the future objective on
  /// devices without nodes; elsewhere the plan for mean + 0.5 standard
  /// deviations.
  Next,
};

/// The per-expert load to plan for (Worst plans for the mean, Next for mean
/// + 0.5 standard deviations of the windows scaled to one total).
/// `windows` is [window][expert].
std::vector<double> robustLoad(const std::vector<std::vector<double>> &windows,
                               Robust kind, double k);

/// Peak over mean device load of `placement` in each window.
std::vector<double>
windowRatios(const Placement &placement,
             const std::vector<std::vector<double>> &windows, int64_t devices);

/// Plans one layer over `windows` ([window][expert]). Worst tries plans for
/// the mean, the maximum, mean + 0.5, 1, 2 and 3 standard deviations, each
/// window alone (up to 16 windows) and, for ours, DeepSeek's plan for the
/// mean, and keeps the one whose worst window has the lowest peak over mean.
/// The plan's peak and mean are those of the planning load.
LayerPlan planWindows(const std::vector<std::vector<double>> &windows,
                      const Topology &topology, const PlanOptions &options,
                      Robust kind, double k);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_ROBUST_H
