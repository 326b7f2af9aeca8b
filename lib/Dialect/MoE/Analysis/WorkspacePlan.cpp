//===- WorkspacePlan.cpp - static sizes of the dispatch workspaces --------===//
#include "moe/Dialect/MoE/Analysis/WorkspacePlan.h"

#include <algorithm>

using namespace mlir::moe;

int64_t mlir::moe::dispatchRowBytes(const DispatchBounds &b) {
  return b.wireActivationBytes + b.topK * int64_t(sizeof(int16_t) + sizeof(float));
}

int64_t mlir::moe::plannedSendRows(const DispatchBounds &b) {
  return b.slots ? b.ep * b.slots : b.maxTokens * std::min(b.topK, b.ep);
}

int64_t mlir::moe::plannedReceiveRows(const DispatchBounds &b) {
  return b.slots ? b.ep * b.slots : b.capacity;
}

std::vector<Workspace> mlir::moe::planWorkspaces(const DispatchBounds &b) {
  const int64_t row = dispatchRowBytes(b);
  const int64_t send = plannedSendRows(b), receive = plannedReceiveRows(b);
  const int64_t xRow = b.hidden * b.elementBytes;
  const int64_t expertRow = b.codeGroups ? b.hidden + 4 * b.codeGroups : xRow;
  const std::string expertRowFormula =
      b.codeGroups ? "(hidden FP8 codes + 4 * groups)" : "hidden * element bytes";
  const std::string sendRows = b.slots ? "ep * slots" : "max_tokens * min(top_k, ep)";
  const std::string receiveRows = b.slots ? "ep * slots" : "capacity";
  const std::string rowFormula = "(wire activation bytes + 6 * top_k)";
  return {
      {"dispatch.send", sendRows + " * " + rowFormula, send * row},
      {"dispatch.recv", receiveRows + " * " + rowFormula, receive * row},
      {"expert.rows", receiveRows + " * " + expertRowFormula, receive * expertRow},
      {"combine.recv", sendRows + " * hidden * element bytes", send * xRow},
  };
}
