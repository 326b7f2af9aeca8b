//===- PlanIO.h - Expert loads and placements as JSON -*- C++ -*-===//
#ifndef MOE_EPLB_PLANIO_H
#define MOE_EPLB_PLANIO_H

#include "moe/EPLB/Placement.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

namespace mlir::moe::eplb {

/// Expert loads: [window][layer][expert] (one window for a 2-D input).
struct LoadTrace {
  std::vector<std::vector<std::vector<double>>> windows;

  int64_t layers() const { return static_cast<int64_t>(windows[0].size()); }
  int64_t experts() const { return static_cast<int64_t>(windows[0][0].size()); }
  /// The loads of `layer` in every window: [window][expert].
  std::vector<std::vector<double>> layer(int64_t layer) const;
};

/// Parses [layers][experts], [windows][layers][experts], or either under the
/// key "logical_count" of an object (the SGLang traces). Loads must be in
/// [0, kMaxLoad], rows equally long; at most limits::kMaxExperts experts and
/// kMaxLayers layers and windows (checked before they are stored), JSON
/// nested at most kMaxJSONDepth deep. Errors name the JSON path, e.g.
/// `$.logical_count[3][7]: expected a number, got "x"`.
llvm::Expected<LoadTrace> parseLoadTrace(llvm::StringRef json);

/// Reads and parses a load file; errors start with the path.
llvm::Expected<LoadTrace> readLoadTrace(llvm::StringRef path);

/// Parses the current placement of each layer: moe-eplb's own output
/// ({"layers": [{"phy2log": [...], "share": [...]}, ...]}, share optional)
/// or DeepSeek's ({"phy2log": [[...], ...]}), checked against `topology`
/// and `experts` (checkTopology() first; a second replica of an expert on
/// one device is accepted: DeepSeek's placements have them). Expert ids are
/// whole numbers in [0, experts), shares in [0, 1] summing to 1 per expert;
/// at most kMaxLayers layers, exactly `expectedLayers` unless -1. Shares
/// default to even. What moe-eplb's output states besides must agree: its
/// experts, slots and devices; each layer's `layer` (its position),
/// `log2phy` and `replica_count` (implied by phy2log).
llvm::Expected<std::vector<Placement>> parsePlacements(llvm::StringRef json, int64_t experts,
                                                       const Topology &topology,
                                                       int64_t expectedLayers = -1);

/// One layer's placement as JSON: phy2log, log2phy, replica_count, share,
/// device_load (for `load`), peak and average.
llvm::json::Object placementJSON(const Placement &placement,
                                 const std::vector<double> &load,
                                 int64_t devices);

/// The JSON path (from `path`) of the first number in `v` that is not
/// finite, or "". llvm::json would print it as inf or nan, which is not JSON.
std::string firstNonFinite(const llvm::json::Value &v,
                           const std::string &path = "$");

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_PLANIO_H
