//===- PhasePlan.cpp - prefill and decode variants of a layer -------------===//
#include "moe/Dialect/MoE/Analysis/PhasePlan.h"

#include <algorithm>

using namespace mlir::moe;

PhasePlan mlir::moe::planPhases(int64_t threshold,
                                std::optional<int64_t> layerMaxTokens) {
  PhasePlan plan;
  plan.decodeMaxTokens = layerMaxTokens ? std::min(threshold, *layerMaxTokens) : threshold;
  return plan;
}

bool mlir::moe::runsDecode(PhaseArg phase, int64_t mostTokensInGroup,
                           int64_t decodeMaxTokens) {
  if (phase == PhaseArg::Auto)
    return mostTokensInGroup <= decodeMaxTokens;
  return phase == PhaseArg::Decode;
}

DecodeLayout mlir::moe::decodeLayout(const LayerShape &shape, int64_t decodeMaxTokens) {
  DecodeLayout layout;
  layout.slotsPerPeer = shape.ep > 1 ? decodeMaxTokens : 0;
  layout.receivedRows = shape.ep > 1 ? shape.ep * decodeMaxTokens : decodeMaxTokens;
  // A received row meets a local expert at most once.
  layout.capacityPerExpert = layout.receivedRows;
  layout.maskedRows = shape.experts / shape.ep * layout.capacityPerExpert;
  return layout;
}

WireBytes mlir::moe::prefillDispatchBytes(const LayerShape &shape, int64_t rowBytes,
                                          int64_t tokens) {
  WireBytes bytes;
  if (shape.ep <= 1)
    return bytes;
  bytes.perStepMax = tokens * std::min(shape.topK, shape.ep) * rowBytes;
  bytes.perTokenMax = double(std::min(shape.topK, shape.ep) * rowBytes);
  return bytes;
}

WireBytes mlir::moe::decodeDispatchBytes(const LayerShape &shape, int64_t rowBytes,
                                         int64_t slots, int64_t tokens) {
  WireBytes bytes;
  if (shape.ep <= 1)
    return bytes;
  bytes.perStepMax = shape.ep * slots * rowBytes;
  bytes.perTokenMax = tokens > 0 ? double(bytes.perStepMax) / double(tokens) : 0.0;
  return bytes;
}
