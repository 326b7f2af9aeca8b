//===- Quantize.h - FP8 E4M3 row quantization for dispatch ------*- C++ -*-===//
#ifndef MOERT_LIB_QUANTIZE_H
#define MOERT_LIB_QUANTIZE_H

#include "Communicator.h"

#include <cstdint>

namespace moert {

/// How dispatch puts a token's hidden vector on the wire. The values are the
/// codes of the C test hooks and of the "dispatch_quantization" counter.
enum class QuantScheme {
  None = 0,            ///< The element type as is (f32 or bf16).
  Fp8Group128F32 = 1,  ///< E4M3, one f32 scale (amax / 448) per 128 elements.
  Fp8Group32Ue8m0 = 2, ///< E4M3, one UE8M0 scale (2^ceil(log2(amax/448))) per 32.
};

/// Short name for messages: "none", "fp8g128", "fp8g32ue8m0".
const char *quantSchemeName(QuantScheme scheme);
/// Elements per scale: 128, 32; 0 for None.
int64_t quantGroupSize(QuantScheme scheme);
/// Bytes of the scales of one row of `hidden` elements: H/128*4 or H/32.
int64_t quantScaleBytes(QuantScheme scheme, int64_t hidden);
/// Bytes of one quantized row on the wire: H FP8 bytes plus the scales.
int64_t quantRowBytes(QuantScheme scheme, int64_t hidden);
/// Fails (naming both sizes) unless `hidden` is a multiple of the group size.
Status checkQuantShape(QuantScheme scheme, int64_t hidden);

/// OCP E4M3 (e4m3fn) with round to nearest, ties to even. |v| >= 448 and
/// +-inf saturate to +-448 (0x7e / 0xfe); NaN gives NaN with v's sign
/// (0x7f / 0xff); -0 stays -0.
uint8_t floatToE4m3(float v);
float e4m3ToFloat(uint8_t code);

/// Quantizes one row of `n` values (a multiple of the group size) into `n`
/// FP8 bytes and quantScaleBytes(n) scale bytes. Per group, amax is the
/// largest |x| over the finite elements (NaN and inf do not set the scale);
/// an element is RNE(x / scale) saturated to +-448. A group without a
/// nonzero finite element gets scale 0 (f32) or byte 0 (UE8M0, 2^-127) and
/// +-0 codes. NaN gives NaN (0x7f / 0xff); +-inf gives +-448 (0x7e / 0xfe),
/// which dequantizes to +-448 * scale.
void quantizeRow(QuantScheme scheme, const float *x, int64_t n, uint8_t *q,
                 uint8_t *scales);
/// The f32 value of each of a row's hidden / group scales.
void decodeScales(QuantScheme scheme, const uint8_t *scales, int64_t hidden,
                  float *out);
/// out[i] = e4m3ToFloat(q[i]) * scale of its group (f32 arithmetic).
void dequantizeRow(QuantScheme scheme, const uint8_t *q, const uint8_t *scales,
                   int64_t n, float *out);

} // namespace moert

#endif // MOERT_LIB_QUANTIZE_H
