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
  std::vector<std::vector<int64_t>> devicesOf(experts);
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t p : slotsOf[e])
      devicesOf[e].push_back(p / perDevice);
  std::vector<std::vector<double>> tokens;
  double peak = minPeakWithShares(counts, devicesOf, devices, &tokens);
  if (slotTokens) {
    slotTokens->assign(placement.phy2log.size(), 0.0);
    for (int64_t e = 0; e < experts; ++e)
      for (size_t k = 0; k < slotsOf[e].size(); ++k)
        (*slotTokens)[slotsOf[e][k]] = tokens[e][k];
  }
  return peak;
}
