//===- BatchBalance.cpp - Per-batch replica selection ---------------------===//
#include "moe/EPLB/BatchBalance.h"

#include "moe/EPLB/ShareFlow.h"

using namespace mlir::moe;
using namespace mlir::moe::eplb;

double eplb::balanceBatch(const Placement &placement, const std::vector<double> &counts,
                          int64_t devices, std::vector<double> *slotTokens) {
  const int64_t experts = static_cast<int64_t>(counts.size());
  const int64_t perDevice = static_cast<int64_t>(placement.phy2log.size()) / devices;
  std::vector<std::vector<int64_t>> slotsOf = logicalToPhysical(placement, experts);
  // The flow needs only the experts with a choice: those with one replica
  // become one fixed load per device (node 0..devices-1 of the reduced
  // problem), the replicated ones follow.
  std::vector<double> load(devices, 0.0);
  std::vector<std::vector<int64_t>> devicesOf(devices);
  for (int64_t d = 0; d < devices; ++d)
    devicesOf[d] = {d};
  std::vector<int64_t> replicated;
  for (int64_t e = 0; e < experts; ++e) {
    if (slotsOf[e].size() == 1) {
      load[slotsOf[e][0] / perDevice] += counts[e];
      continue;
    }
    replicated.push_back(e);
    load.push_back(counts[e]);
    devicesOf.emplace_back();
    for (int64_t p : slotsOf[e])
      devicesOf.back().push_back(p / perDevice);
  }
  std::vector<std::vector<double>> tokens;
  double peak = minPeakWithShares(load, devicesOf, devices, &tokens);
  if (slotTokens) {
    slotTokens->assign(placement.phy2log.size(), 0.0);
    for (int64_t e = 0; e < experts; ++e)
      if (slotsOf[e].size() == 1)
        (*slotTokens)[slotsOf[e][0]] = counts[e];
    for (size_t i = 0; i < replicated.size(); ++i) {
      const std::vector<int64_t> &slots = slotsOf[replicated[i]];
      for (size_t k = 0; k < slots.size(); ++k)
        (*slotTokens)[slots[k]] = tokens[devices + i][k];
    }
  }
  return peak;
}
