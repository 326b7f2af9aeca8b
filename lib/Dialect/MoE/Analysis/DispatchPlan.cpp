//===- DispatchPlan.cpp - quantization and TP decisions for a dispatch ----===//
#include "moe/Dialect/MoE/Analysis/DispatchPlan.h"

#include "CheckedSize.h"

#include <algorithm>

using namespace mlir::moe;

std::optional<WireFormat> mlir::moe::parseWireFormat(const std::string &name) {
  if (name == "none")
    return WireFormat::Native;
  if (name == "fp8-e4m3-g128")
    return WireFormat::Fp8G128;
  if (name == "fp8-e4m3-g32-ue8m0")
    return WireFormat::Fp8G32Ue8m0;
  return std::nullopt;
}

int64_t mlir::moe::scaleGroup(WireFormat format) {
  switch (format) {
  case WireFormat::Native:
    return 0;
  case WireFormat::Fp8G128:
    return 128;
  case WireFormat::Fp8G32Ue8m0:
    return 32;
  }
  return 0;
}

int64_t mlir::moe::wireActivationBytes(WireFormat format, int64_t hidden,
                                       int64_t elementBytes) {
  detail::CheckedSize c;
  int64_t bytes = 0;
  switch (format) {
  case WireFormat::Native:
    bytes = c.mul(hidden, elementBytes);
    break;
  case WireFormat::Fp8G128:
    bytes = c.add(hidden, c.mul(hidden / 128, 4));
    break;
  case WireFormat::Fp8G32Ue8m0:
    bytes = c.add(hidden, hidden / 32);
    break;
  }
  return c.ok() ? bytes : -1;
}

QuantDecision mlir::moe::decideQuantization(WireFormat format,
                                            std::optional<int64_t> hidden) {
  QuantDecision decision;
  if (format == WireFormat::Native) {
    decision.why = "no quantization asked for";
    return decision;
  }
  const int64_t group = scaleGroup(format);
  if (!hidden || *hidden % group != 0) {
    decision.why = "hidden size " + (hidden ? std::to_string(*hidden) : std::string("?")) +
                   " is not a multiple of " + std::to_string(group);
    return decision;
  }
  decision.quantize = true;
  return decision;
}

TpDecision mlir::moe::decideTpDedupe(int64_t tp, std::optional<int64_t> maxTokensPerRank) {
  TpDecision decision;
  if (tp <= 1)
    return decision;
  decision.slice = true;
  if (maxTokensPerRank)
    decision.slicedMaxTokens = detail::ceilDiv(*maxTokensPerRank, tp);
  return decision;
}

RowRange mlir::moe::tpSliceRows(int64_t tokens, int64_t tp, int64_t index) {
  RowRange range;
  if (tokens <= 0 || tp <= 0 || index < 0)
    return range;
  const int64_t share = detail::ceilDiv(tokens, tp);
  // index * share may exceed int64_t for an index past the group: such a
  // slice is empty, as any slice starting at or after `tokens`.
  std::optional<int64_t> start = llvm::checkedMul(index, share);
  range.start = start ? std::min(*start, tokens) : tokens;
  range.size = std::min(share, tokens - range.start);
  return range;
}
