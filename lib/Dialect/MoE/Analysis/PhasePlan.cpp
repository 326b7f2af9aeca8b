//===- PhasePlan.cpp - prefill and decode variants of a layer -------------===//
#include "moe/Dialect/MoE/Analysis/PhasePlan.h"
#include "moe/Dialect/MoE/Analysis/DispatchPlan.h"
#include "moe/Dialect/MoE/Analysis/WorkspacePlan.h"

#include "CheckedSize.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>

using namespace mlir::moe;
using mlir::moe::detail::CheckedSize;

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

std::optional<DecodeLayout> mlir::moe::decodeLayout(const LayerShape &shape,
                                                    int64_t decodeMaxTokens) {
  if (shape.ep < 1 || shape.experts < 0 || decodeMaxTokens < 0)
    return std::nullopt;
  CheckedSize c;
  DecodeLayout layout;
  layout.slotsPerPeer = shape.ep > 1 ? decodeMaxTokens : 0;
  layout.receivedRows = shape.ep > 1 ? c.mul(shape.ep, decodeMaxTokens) : decodeMaxTokens;
  // A received row meets a local expert at most once.
  layout.capacityPerExpert = layout.receivedRows;
  layout.maskedRows = c.mul(shape.experts / shape.ep, layout.capacityPerExpert);
  if (!c.ok())
    return std::nullopt;
  return layout;
}

std::optional<std::string> mlir::moe::checkPlannedSizes(const LayerShape &shape,
                                                        int64_t maxTokens) {
  constexpr int64_t kMost = int64_t(1) << 62;
  constexpr int64_t kMaxI32 = (int64_t(1) << 31) - 1;
  const std::string tokens = std::to_string(maxTokens) + " tokens per rank";
  std::optional<DecodeLayout> decode = decodeLayout(shape, maxTokens);
  CheckedSize c;
  // The local dispatch numbers its (row, choice) pairs and its rows in i32
  // (slot, row_expert): R * k pairs, R = ep * tokens received rows (the
  // prefill capacity too), and local experts x R masked rows in decode.
  const int64_t pairs = decode ? c.mul(decode->receivedRows, shape.topK) : 0;
  if (!decode || !c.ok() || pairs > kMaxI32 || decode->maskedRows > kMaxI32)
    return "the rows planned for " + tokens + " (ep x tokens x top-k received "
           "choices, local experts x ep x tokens decode rows) exceed the i32 row ids "
           "(2^31 - 1)";
  if (shape.ep <= 1)
    return std::nullopt;
  const int64_t capacity = c.mul(shape.ep, maxTokens);
  for (bool fixed : {false, true}) {
    DispatchBounds bounds;
    bounds.ep = shape.ep;
    bounds.maxTokens = maxTokens;
    bounds.topK = shape.topK;
    bounds.hidden = shape.hidden;
    bounds.elementBytes = shape.elementBytes;
    bounds.wireActivationBytes =
        wireActivationBytes(WireFormat::Native, shape.hidden, shape.elementBytes);
    bounds.capacity = capacity;
    bounds.slots = fixed ? maxTokens : 0;
    std::vector<Workspace> workspaces = planWorkspaces(bounds);
    if (workspaces.empty() ||
        llvm::any_of(workspaces, [&](const Workspace &w) { return w.bytes > kMost; }))
      return "the dispatch workspaces for " + tokens + " on " +
             std::to_string(shape.ep) + " ranks exceed 2^62 bytes";
  }
  return std::nullopt;
}

WireBytes mlir::moe::prefillDispatchBytes(const LayerShape &shape, int64_t rowBytes,
                                          int64_t tokens) {
  WireBytes bytes;
  if (shape.ep <= 1)
    return bytes;
  CheckedSize c;
  const int64_t perToken = c.mul(std::min(shape.topK, shape.ep), rowBytes);
  bytes.perStepMax = c.mul(tokens, perToken);
  bytes.perTokenMax = double(perToken);
  if (!c.ok())
    return WireBytes{0, 0.0, false};
  return bytes;
}

WireBytes mlir::moe::decodeDispatchBytes(const LayerShape &shape, int64_t rowBytes,
                                         int64_t slots, int64_t tokens) {
  WireBytes bytes;
  if (shape.ep <= 1)
    return bytes;
  CheckedSize c;
  bytes.perStepMax = c.mul(shape.ep, slots, rowBytes);
  if (!c.ok())
    return WireBytes{0, 0.0, false};
  bytes.perTokenMax = tokens > 0 ? double(bytes.perStepMax) / double(tokens) : 0.0;
  return bytes;
}
