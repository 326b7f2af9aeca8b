//===- fp8_quantize_fuzzer.cpp - fuzzes the runtime's FP8 quantizer -------===//
//
// Bytes -> a scheme, a row of floats (raw bit patterns: NaN, inf,
// subnormals included, optionally scaled per group by a power of two) ->
// runtime/lib/Quantize.cpp's quantizeRow, dequantizeRow and decodeScales.
// Nothing may crash (ASan, UBSan), and the round trip must keep the
// invariants of docs/FP8Dispatch.md:
//  - NaN stays NaN (sign kept); +-inf becomes +-448 x the group's scale;
//  - a finite x decodes to a finite value of x's sign (or zero) within
//      max(2^-4 |x|, 2^-10 s) + 2^-21 |x| + 2^-140
//    (s the group's decoded scale; 2^-140 bounds what f32 underflow of the
//    scale or of q x s adds: a scale below 2^-126 is rounded in steps of
//    2^-149, and 448 x 2^-150 < 2^-141), except the documented limit: an
//    |x| >= 15/16 x 2^128 may round up and decode to inf of x's sign;
//  - fp8g128: s = amax / 448 in f32 (amax: the largest finite |x|);
//    fp8g32ue8m0: s is the smallest power of two with amax <= 448 s,
//    clamped to [2^-127, 2^127];
//  - dequantizeRow is e4m3ToFloat(code) x decodeScales' scale, bit for bit;
//  - every E4M3 code round-trips, and floatToE4m3 of any float is its
//    nearest code (ties to even, saturating at 448).
//
// Input layout: byte 0 the scheme (0..2; 0 is not FP8 and must be refused),
// byte 1 the groups (1..8), byte 2 a per-group exponent shift mode, then the
// row's floats, 4 bytes each (missing bytes read as 0).
//
//===----------------------------------------------------------------------===//
#include "Quantize.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace moert;

namespace {
[[noreturn]] void broken() { __builtin_trap(); }

void require(bool ok) {
  if (!ok)
    broken();
}

bool sameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

/// The nearest E4M3 value to v (ties to even), saturating at +-448: what
/// floatToE4m3 must return, found by search over the codes.
void checkNearestCode(float v) {
  const uint8_t c = floatToE4m3(v);
  const float got = e4m3ToFloat(c);
  if (std::isnan(v)) {
    require(std::isnan(got) && std::signbit(got) == std::signbit(v));
    return;
  }
  require(!std::isnan(got) && (got == 0 || std::signbit(got) == std::signbit(v)));
  const double target = std::fabs(double(v)) >= 448 ? std::copysign(448.0, double(v)) : v;
  const double err = std::fabs(double(got) - target);
  for (int k = 0; k < 256; ++k) {
    const float other = e4m3ToFloat(uint8_t(k));
    if (std::isnan(other))
      continue;
    const double e = std::fabs(double(other) - target);
    require(e >= err);
    if (e == err && other != got) // a tie: the even code wins
      require((c & 1) == 0);
  }
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool codesChecked = false;
  if (!codesChecked) {
    for (int c = 0; c < 256; ++c)
      require(floatToE4m3(e4m3ToFloat(uint8_t(c))) == c);
    codesChecked = true;
  }
  if (size < 3)
    return 0;
  const int schemeCode = data[0] % 3;
  const QuantScheme scheme = QuantScheme(schemeCode);
  const int64_t groups = 1 + data[1] % 8;
  const uint8_t shiftMode = data[2];
  if (scheme == QuantScheme::None) {
    require(bool(checkQuantShape(scheme, 128))); // not an FP8 scheme
    require(quantGroupSize(scheme) == 0 && quantScaleBytes(scheme, 128) == 0);
    return 0;
  }
  const int64_t group = quantGroupSize(scheme);
  const int64_t n = groups * group;
  require(!checkQuantShape(scheme, n));
  require(bool(checkQuantShape(scheme, n + 1)));
  require(bool(checkQuantShape(scheme, -group)));
  require(quantRowBytes(scheme, n) == n + quantScaleBytes(scheme, n));

  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = 0;
    for (int b = 0; b < 4; ++b) {
      size_t at = 3 + size_t(i) * 4 + size_t(b);
      bits |= uint32_t(at < size ? data[at] : 0) << (8 * b);
    }
    std::memcpy(&x[i], &bits, 4);
  }
  // Shift each group's magnitude by a power of two taken from the mode (to
  // reach the underflow and overflow ends with few mutations).
  if (shiftMode & 1)
    for (int64_t g = 0; g < groups; ++g) {
      const int shift = int((shiftMode >> 1) * 3 + g * 17) % 300 - 150;
      for (int64_t i = g * group; i < (g + 1) * group; ++i)
        x[i] = std::ldexp(x[i], shift);
    }

  std::vector<uint8_t> q(n), scales(quantScaleBytes(scheme, n));
  std::vector<float> back(n), decoded(groups);
  quantizeRow(scheme, x.data(), n, q.data(), scales.data());
  dequantizeRow(scheme, q.data(), scales.data(), n, back.data());
  decodeScales(scheme, scales.data(), n, decoded.data());

  for (int64_t g = 0; g < groups; ++g) {
    const float s = decoded[g];
    float amax = 0.0f;
    for (int64_t i = g * group; i < (g + 1) * group; ++i)
      if (std::isfinite(x[i]))
        amax = std::fmax(amax, std::fabs(x[i]));
    // The scale.
    require(std::isfinite(s) && s >= 0.0f);
    if (scheme == QuantScheme::Fp8Group128F32) {
      require(sameBits(s, amax / 448.0f));
    } else {
      int e = 0;
      const float m = std::frexp(s, &e);
      require(m == 0.5f);                         // a power of two
      require(e - 1 >= -127 && e - 1 <= 127);     // clamped exponent range
      if (amax > 0.0f && e - 1 > -127)            // the smallest that fits
        require(double(amax) > 448.0 * double(s) / 2.0);
      require(double(amax) <= 448.0 * double(s)); // it fits
    }
    for (int64_t i = g * group; i < (g + 1) * group; ++i) {
      const float v = x[i], d = back[i];
      require(sameBits(d, e4m3ToFloat(q[i]) * s)); // dequantize is the formula
      if (std::isnan(v)) {
        require((q[i] & 0x7f) == 0x7f && std::isnan(d));
        require((q[i] & 0x80) == (std::signbit(v) ? 0x80 : 0));
        continue;
      }
      if (std::isinf(v)) {
        require(q[i] == (std::signbit(v) ? 0xfe : 0x7e));
        continue;
      }
      require(d == 0.0f || std::signbit(d) == std::signbit(v));
      if (std::isinf(d)) { // docs/FP8Dispatch.md: only near FLT_MAX
        require(std::fabs(v) >= 0x1.ep127f);
        continue;
      }
      const double bound = std::fmax(std::ldexp(std::fabs(double(v)), -4),
                                     std::ldexp(double(s), -10)) +
                           std::ldexp(std::fabs(double(v)), -21) + std::ldexp(1.0, -140);
      require(std::fabs(double(d) - double(v)) <= bound);
    }
  }
  // floatToE4m3 on the raw values (and on them scaled into its range).
  for (int64_t i = 0; i < n && i < 16; ++i) {
    checkNearestCode(x[i]);
    if (std::isfinite(x[i]) && x[i] != 0.0f) {
      int e = 0;
      std::frexp(x[i], &e);
      checkNearestCode(std::ldexp(x[i], 4 - e)); // into [8, 16)
      checkNearestCode(std::ldexp(x[i], -8 - e)); // subnormal E4M3 range
    }
  }
  return 0;
}
