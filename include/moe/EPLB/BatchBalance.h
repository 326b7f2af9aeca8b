//===- BatchBalance.h - Per-batch replica selection --------------*- C++ -*-===//
#ifndef MOE_EPLB_BATCHBALANCE_H
#define MOE_EPLB_BATCHBALANCE_H

#include "moe/EPLB/Placement.h"

namespace mlir::moe::eplb {

/// Per-batch replica selection for a fixed placement: given this batch's
/// tokens per logical expert (`counts`), how many of them each physical slot
/// takes so that the batch's peak device load is least. Returns that peak;
/// `slotTokens` (optional) receives the tokens of every slot. The optimum of
/// the flow problem (ShareFlow.h) in fractional tokens; rounding to whole
/// tokens adds less than one token per replica. Slot p is on device
/// p / (slots / devices).
double balanceBatch(const Placement &placement, const std::vector<double> &counts,
                    int64_t devices, std::vector<double> *slotTokens = nullptr);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_BATCHBALANCE_H
