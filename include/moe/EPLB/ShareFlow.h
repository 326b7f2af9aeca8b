//===- ShareFlow.h - Best token shares for a fixed placement -*- C++ -*-===//
#ifndef MOE_EPLB_SHAREFLOW_H
#define MOE_EPLB_SHAREFLOW_H

#include "moe/EPLB/Placement.h"

namespace mlir::moe::eplb {

/// The least peak device load when expert e's tokens may be spread freely
/// over the devices devicesOf[e] (every expert with load needs one), on
/// top of `fixed[d]` tokens already on device d (optional). `tokens`
/// (optional) receives how many tokens of e go to devicesOf[e][k].
double minPeakWithShares(const std::vector<double> &load,
                         const std::vector<std::vector<int64_t>> &devicesOf,
                         int64_t devices,
                         std::vector<std::vector<double>> *tokens = nullptr,
                         const std::vector<double> *fixed = nullptr);

/// Sets `placement.share` to the shares of least peak in which every
/// replica takes at least `floor` of an even share (floor in [0, 1]) and
/// returns that peak: no replica is placed only to take nothing.
double floorShares(Placement &placement, const std::vector<double> &load,
                   int64_t devices, double floor);

/// Sets `placement.share` to the token shares that minimise the peak device
/// load when replicas may take uneven shares of their expert's tokens, and
/// returns that peak. The optimum is max over expert sets X of
/// load(X) / |devices holding X|; it is found exactly by Dinkelbach's method
/// on a max flow (source -> expert -> device -> sink, devices capped).
double optimizeShares(Placement &placement, const std::vector<double> &load,
                      int64_t devices);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_SHAREFLOW_H
