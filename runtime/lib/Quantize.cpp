//===- Quantize.cpp - FP8 E4M3 row quantization for dispatch --------------===//
#include "Quantize.h"
#include "Message.h"

#include <cmath>
#include <cstring>
#include <sstream>

using namespace moert;

namespace {
constexpr float kE4m3Max = 448.0f;

uint32_t bitsOf(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return bits;
}

float floatOf(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

/// Largest |x| over the finite elements of a group (0 if there is none).
float finiteAmax(const float *x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(x[i]) && std::fabs(x[i]) > amax)
      amax = std::fabs(x[i]);
  return amax;
}

/// The biased UE8M0 exponent of the smallest power of two 2^e with
/// amax <= 448 * 2^e, clamped to [0, 254] (byte 0 = 2^-127). Exact: amax =
/// m * 2^E with m in [0.5, 1) and 448 = 0.875 * 2^9, so e = E - 9 when
/// m <= 0.875, else E - 8.
uint8_t ue8m0Exponent(float amax) {
  if (amax == 0.0f)
    return 0;
  int exponent;
  float mantissa = std::frexp(amax, &exponent);
  int e = mantissa <= 0.875f ? exponent - 9 : exponent - 8;
  if (e < -127)
    e = -127; // a larger scale than needed: still no overflow
  if (e > 127)
    e = 127; // unreachable for finite f32 amax (< 2^128 gives e <= 120)
  return uint8_t(e + 127);
}

float ue8m0Scale(uint8_t byte) {
  if (byte == 0xff)
    return NAN; // the UE8M0 NaN; never written
  return std::ldexp(1.0f, int(byte) - 127);
}

/// One element with the group's scale; NaN and inf never reach the division.
uint8_t quantizeElement(float x, float scale) {
  uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x))
    return sign | 0x7f;
  if (std::isinf(x))
    return sign | 0x7e;
  if (scale == 0.0f) // no nonzero finite element, or amax / 448 underflowed
    return sign;
  return floatToE4m3(x / scale);
}
} // namespace

uint8_t moert::floatToE4m3(float v) {
  uint32_t bits = bitsOf(v);
  uint8_t sign = uint8_t((bits >> 24) & 0x80);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) // NaN
    return sign | 0x7f;
  if (abs >= 0x43e00000u) // >= 448, inf included: saturate
    return sign | 0x7e;
  if (abs < 0x3c800000u) { // below 2^-6: subnormal, steps of 2^-9
    // a * 512 is exact and in [0, 8); rounding to 8 gives code 0x08, which
    // is the smallest normal 2^-6, so the integer is the code.
    return sign | uint8_t(std::nearbyint(floatOf(abs) * 512.0f));
  }
  // Normal: keep 3 of the 23 mantissa bits, ties to even; a carry moves into
  // the exponent. The f32 exponent bias 127 becomes E4M3's 7.
  uint32_t rounded = (abs + 0x7ffffu + ((abs >> 20) & 1u)) >> 20;
  return sign | uint8_t(rounded - (120u << 3));
}

float moert::e4m3ToFloat(uint8_t code) {
  float sign = (code & 0x80) ? -1.0f : 1.0f;
  int exponent = (code >> 3) & 0xf, mantissa = code & 0x7;
  if ((code & 0x7f) == 0x7f)
    return std::copysign(NAN, sign);
  if (exponent == 0)
    return sign * std::ldexp(float(mantissa), -9);
  return sign * std::ldexp(float(8 + mantissa), exponent - 10);
}

const char *moert::quantSchemeName(QuantScheme scheme) {
  switch (scheme) {
  case QuantScheme::None:
    return "none";
  case QuantScheme::Fp8Group128F32:
    return "fp8g128";
  case QuantScheme::Fp8Group32Ue8m0:
    return "fp8g32ue8m0";
  }
  return "unknown";
}

int64_t moert::quantGroupSize(QuantScheme scheme) {
  switch (scheme) {
  case QuantScheme::None:
    return 0;
  case QuantScheme::Fp8Group128F32:
    return 128;
  case QuantScheme::Fp8Group32Ue8m0:
    return 32;
  }
  return 0;
}

int64_t moert::quantScaleBytes(QuantScheme scheme, int64_t hidden) {
  switch (scheme) {
  case QuantScheme::None:
    return 0;
  case QuantScheme::Fp8Group128F32:
    return hidden / 128 * int64_t(sizeof(float));
  case QuantScheme::Fp8Group32Ue8m0:
    return hidden / 32;
  }
  return 0;
}

int64_t moert::quantRowBytes(QuantScheme scheme, int64_t hidden) {
  return hidden + quantScaleBytes(scheme, hidden);
}

Status moert::checkQuantShape(QuantScheme scheme, int64_t hidden) {
  int64_t group = quantGroupSize(scheme);
  if (group == 0) {
    MessageStream os;
    os << "quantization scheme " << int(scheme) << " (" << quantSchemeName(scheme)
       << ") is not an FP8 scheme";
    return os.str();
  }
  if (hidden < 0 || hidden % group != 0) {
    MessageStream os;
    os << "hidden size " << hidden << " is not a multiple of the group size "
       << group << " of FP8 scheme " << quantSchemeName(scheme);
    return os.str();
  }
  return std::nullopt;
}

void moert::quantizeRow(QuantScheme scheme, const float *x, int64_t n,
                        uint8_t *q, uint8_t *scales) {
  const int64_t group = quantGroupSize(scheme);
  if (group == 0)
    return;
  for (int64_t g = 0; g * group < n; ++g) {
    const float *xs = x + g * group;
    uint8_t *qs = q + g * group;
    float amax = finiteAmax(xs, group);
    float scale;
    if (scheme == QuantScheme::Fp8Group128F32) {
      scale = amax / kE4m3Max;
      std::memcpy(scales + g * sizeof(float), &scale, sizeof(float));
    } else {
      uint8_t byte = ue8m0Exponent(amax);
      scales[g] = byte;
      scale = ue8m0Scale(byte);
    }
    for (int64_t i = 0; i < group; ++i)
      qs[i] = quantizeElement(xs[i], scale);
  }
}

void moert::dequantizeRow(QuantScheme scheme, const uint8_t *q,
                          const uint8_t *scales, int64_t n, float *out) {
  const int64_t group = quantGroupSize(scheme);
  if (group == 0)
    return;
  for (int64_t g = 0; g * group < n; ++g) {
    float scale;
    if (scheme == QuantScheme::Fp8Group128F32)
      std::memcpy(&scale, scales + g * sizeof(float), sizeof(float));
    else
      scale = ue8m0Scale(scales[g]);
    for (int64_t i = g * group; i < (g + 1) * group; ++i)
      out[i] = e4m3ToFloat(q[i]) * scale;
  }
}

void moert::decodeScales(QuantScheme scheme, const uint8_t *scales, int64_t hidden,
                         float *out) {
  const int64_t groups = hidden / quantGroupSize(scheme);
  if (scheme == QuantScheme::Fp8Group128F32) {
    std::memcpy(out, scales, groups * sizeof(float));
    return;
  }
  for (int64_t g = 0; g < groups; ++g)
    out[g] = ue8m0Scale(scales[g]);
}
