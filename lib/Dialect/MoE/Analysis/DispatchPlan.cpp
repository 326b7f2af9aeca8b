//===- DispatchPlan.cpp - quantization and TP decisions for a dispatch ----===//
#include "moe/Dialect/MoE/Analysis/DispatchPlan.h"

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
  switch (format) {
  case WireFormat::Native:
    return hidden * elementBytes;
  case WireFormat::Fp8G128:
    return hidden + hidden / 128 * 4;
  case WireFormat::Fp8G32Ue8m0:
    return hidden + hidden / 32;
  }
  return 0;
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
    decision.slicedMaxTokens = (*maxTokensPerRank + tp - 1) / tp;
  return decision;
}

RowRange mlir::moe::tpSliceRows(int64_t tokens, int64_t tp, int64_t index) {
  const int64_t share = (tokens + tp - 1) / tp;
  RowRange range;
  range.start = std::min(index * share, tokens);
  range.size = std::min(share, tokens - range.start);
  return range;
}
