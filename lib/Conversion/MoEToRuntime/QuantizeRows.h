//===- QuantizeRows.h - FP8 E4M3 rows as linalg, for the all-gather dispatch -*- C++ -*-===//
//
// The dispatch's FP8 quantization (runtime/lib/Quantize.cpp's scheme,
// bit for bit) as linalg on tensors, so that the layer quantizes its rows
// before the all-gather and dequantizes what it received, on the CPU and
// as kernels on a GPU (where the runtime cannot touch the rows).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_CONVERSION_MOETORUNTIME_QUANTIZEROWS_H
#define MOE_LIB_CONVERSION_MOETORUNTIME_QUANTIZEROWS_H

#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::moe {

/// Elements per scale.
int64_t quantGroup(DispatchQuantization scheme);

/// The type of one scale on the wire: f32 (fp8_e4m3_g128) or the UE8M0
/// exponent byte as i8 (fp8_e4m3_g32_ue8m0).
Type scaleElementType(Builder &b, DispatchQuantization scheme);

/// Rows `x[T, H]` (f32 or bf16; H a multiple of the group) as E4M3 codes
/// `[T, H]` (i8) and one scale per group `[T, H/group]`: scale = amax / 448
/// over the group's finite elements (g128), or the smallest power of two
/// 2^e with amax <= 448 * 2^e (UE8M0); codes rounded to nearest, ties to
/// even, saturated at +-448, NaN kept, 0 where the scale is 0.
std::pair<Value, Value> quantizeRows(ImplicitLocOpBuilder &b, Value x, DispatchQuantization scheme);

/// The values of `codes[N, H]` with `scales[N, H/group]` as `type`'s rows.
Value dequantizeRows(ImplicitLocOpBuilder &b, Value codes, Value scales,
                     DispatchQuantization scheme, RankedTensorType type);

/// The wire's `scales[N, H/group]` as the f32 values the experts multiply
/// by (g128: themselves; UE8M0: 2^(byte - 127)).
Value scalesAsF32(ImplicitLocOpBuilder &b, Value scales, DispatchQuantization scheme);

} // namespace mlir::moe

#endif // MOE_LIB_CONVERSION_MOETORUNTIME_QUANTIZEROWS_H
