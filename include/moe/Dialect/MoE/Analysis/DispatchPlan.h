//===- DispatchPlan.h - quantization and TP decisions for a dispatch -*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_ANALYSIS_DISPATCHPLAN_H
#define MOE_DIALECT_MOE_ANALYSIS_DISPATCHPLAN_H

#include <cstdint>
#include <optional>
#include <string>

namespace mlir::moe {

/// How activations travel in an expert-parallel dispatch.
enum class WireFormat { Native, Fp8G128, Fp8G32Ue8m0 };

/// "none", "fp8-e4m3-g128" or "fp8-e4m3-g32-ue8m0" (moe-fuse-quant-dispatch's
/// scheme option); nothing for another name.
std::optional<WireFormat> parseWireFormat(const std::string &name);
/// Elements that share one scale (0 for Native).
int64_t scaleGroup(WireFormat format);
/// Bytes of one row's activations on the wire: H elements, or H FP8 codes
/// plus one f32 (g128) or one UE8M0 byte (g32) scale per group. -1 when the
/// product overflows or a size is negative.
int64_t wireActivationBytes(WireFormat format, int64_t hidden, int64_t elementBytes);

/// The decision of moe-fuse-quant-dispatch for one dispatch: quantize when
/// the hidden size is static and made of whole groups; otherwise `why`.
struct QuantDecision {
  bool quantize = false;
  std::string why;
};
QuantDecision decideQuantization(WireFormat format, std::optional<int64_t> hidden);

/// The decision of moe-dedupe-tp-dispatch: with tp > 1 every TP rank
/// dispatches its 1/tp slice, so its token maximum is ceil(max / tp).
struct TpDecision {
  bool slice = false;
  std::optional<int64_t> slicedMaxTokens;
};
TpDecision decideTpDedupe(int64_t tp, std::optional<int64_t> maxTokensPerRank);

/// Rows [start, start + size) of `tokens` that TP rank `index` of `tp`
/// dispatches: consecutive slices of ceil(tokens / tp); the last may be
/// short or empty. The lowering of moe.tp_slice and the runtime's gather
/// compute the same. Empty for tokens <= 0, tp <= 0 or a negative index;
/// never overflows.
struct RowRange {
  int64_t start = 0, size = 0;
};
RowRange tpSliceRows(int64_t tokens, int64_t tp, int64_t index);

} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_ANALYSIS_DISPATCHPLAN_H
