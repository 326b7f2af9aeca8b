//===- WorkspacePlan.cpp - static sizes of the dispatch workspaces --------===//
#include "moe/Dialect/MoE/Analysis/WorkspacePlan.h"

#include "CheckedSize.h"
#include "moe/Support/Limits.h"

#include <algorithm>

using namespace mlir::moe;
using mlir::moe::detail::CheckedSize;

std::optional<std::string> mlir::moe::checkDispatchBounds(const DispatchBounds &b) {
  auto outside = [](int64_t v, int64_t lo, int64_t hi) { return v < lo || v > hi; };
  auto why = [](const char *name, int64_t v, int64_t lo, int64_t hi) {
    return std::string(name) + " " + std::to_string(v) + " is outside [" +
           std::to_string(lo) + ", " + std::to_string(hi) + "]";
  };
  constexpr int64_t kMaxRows = limits::kMaxTokens * limits::kMaxRanks;
  if (outside(b.ep, 1, limits::kMaxRanks))
    return why("ep", b.ep, 1, limits::kMaxRanks);
  if (outside(b.maxTokens, 0, limits::kMaxTokens))
    return why("max_tokens", b.maxTokens, 0, limits::kMaxTokens);
  if (outside(b.topK, 1, limits::kMaxTopK))
    return why("top-k", b.topK, 1, limits::kMaxTopK);
  if (outside(b.hidden, 1, limits::kMaxHidden))
    return why("hidden size", b.hidden, 1, limits::kMaxHidden);
  if (outside(b.elementBytes, 1, 8))
    return why("element bytes", b.elementBytes, 1, 8);
  if (outside(b.wireActivationBytes, 0, 8 * limits::kMaxHidden))
    return why("wire activation bytes", b.wireActivationBytes, 0, 8 * limits::kMaxHidden);
  if (outside(b.capacity, 0, kMaxRows))
    return why("capacity", b.capacity, 0, kMaxRows);
  if (outside(b.slots, 0, limits::kMaxTokens))
    return why("slots", b.slots, 0, limits::kMaxTokens);
  if (outside(b.codeGroups, 0, limits::kMaxHidden))
    return why("scale groups", b.codeGroups, 0, limits::kMaxHidden);
  if (planWorkspaces(b).empty())
    return std::string("a workspace size overflows a 64-bit byte count");
  return std::nullopt;
}

int64_t mlir::moe::dispatchRowBytes(const DispatchBounds &b) {
  CheckedSize c;
  int64_t bytes = c.add(b.wireActivationBytes,
                        c.mul(b.topK, int64_t(sizeof(int16_t) + sizeof(float))));
  return c.ok() ? bytes : -1;
}

int64_t mlir::moe::gatherRowBytes(const DispatchBounds &b) {
  CheckedSize c;
  int64_t bytes =
      c.add(b.wireActivationBytes, c.mul(b.topK, int64_t(sizeof(int32_t) + sizeof(float))));
  return c.ok() ? bytes : -1;
}

int64_t mlir::moe::plannedSendRows(const DispatchBounds &b) {
  CheckedSize c;
  int64_t rows = b.slots ? c.mul(b.ep, b.slots) : c.mul(b.maxTokens, std::min(b.topK, b.ep));
  return c.ok() ? rows : -1;
}

int64_t mlir::moe::plannedReceiveRows(const DispatchBounds &b) {
  CheckedSize c;
  int64_t rows = b.slots ? c.mul(b.ep, b.slots) : b.capacity;
  return c.ok() && rows >= 0 ? rows : -1;
}

std::vector<Workspace> mlir::moe::planWorkspaces(const DispatchBounds &b) {
  CheckedSize c;
  // -1 (overflow) poisons every product it enters.
  const int64_t row = dispatchRowBytes(b);
  const int64_t send = plannedSendRows(b), receive = plannedReceiveRows(b);
  const int64_t xRow = c.mul(b.hidden, b.elementBytes);
  const int64_t expertRow = b.codeGroups ? c.add(b.hidden, c.mul(4, b.codeGroups)) : xRow;
  const std::string expertRowFormula =
      b.codeGroups ? "(hidden FP8 codes + 4 * groups)" : "hidden * element bytes";
  const std::string sendRows = b.slots ? "ep * slots" : "max_tokens * min(top_k, ep)";
  const std::string receiveRows = b.slots ? "ep * slots" : "capacity";
  const std::string rowFormula = "(wire activation bytes + 6 * top_k)";
  std::vector<Workspace> workspaces = {
      {"dispatch.send", sendRows + " * " + rowFormula, c.mul(send, row)},
      {"dispatch.recv", receiveRows + " * " + rowFormula, c.mul(receive, row)},
      {"expert.rows", receiveRows + " * " + expertRowFormula, c.mul(receive, expertRow)},
      {"combine.recv", sendRows + " * hidden * element bytes", c.mul(send, xRow)},
  };
  if (!c.ok())
    return {};
  return workspaces;
}
