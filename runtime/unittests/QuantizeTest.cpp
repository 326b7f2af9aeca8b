//===- QuantizeTest.cpp - FP8 E4M3 row quantization and FP8 dispatch ------===//
#include "Collectives.h"
#include "ExpertParallel.h"
#include "LocalCommunicator.h"
#include "Quantize.h"
#include "moert/moert.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace moert;

namespace {
constexpr QuantScheme kSchemes[] = {QuantScheme::Fp8Group128F32,
                                    QuantScheme::Fp8Group32Ue8m0};

float scaleOf(QuantScheme scheme, const std::vector<uint8_t> &scales, int64_t g) {
  if (scheme == QuantScheme::Fp8Group128F32) {
    float s;
    std::memcpy(&s, scales.data() + 4 * g, 4);
    return s;
  }
  return std::ldexp(1.0f, int(scales[g]) - 127);
}

struct Quantized {
  std::vector<uint8_t> q, scales;
  std::vector<float> back;
};

Quantized roundTrip(QuantScheme scheme, const std::vector<float> &x) {
  int64_t n = int64_t(x.size());
  Quantized r;
  r.q.resize(n);
  r.scales.resize(quantScaleBytes(scheme, n));
  r.back.resize(n);
  quantizeRow(scheme, x.data(), n, r.q.data(), r.scales.data());
  dequantizeRow(scheme, r.q.data(), r.scales.data(), n, r.back.data());
  return r;
}

/// The per-element bound of docs/FP8Dispatch.md: half a step of E4M3 at
/// x / scale, i.e. 2^-4 |x| in the normal range and 2^-10 scale below it,
/// plus the f32 rounding of the division and the product.
float errorBound(float x, float scale) {
  return std::max(std::ldexp(std::fabs(x), -4), std::ldexp(scale, -10)) +
         std::ldexp(std::fabs(x), -21);
}

/// Values over many binades, both signs, some groups tiny, some huge.
std::vector<float> randomRow(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-12, 6), groupBinade(-30, 30);
  std::vector<float> x(n);
  for (int64_t g = 0; g < n / 32; ++g) {
    int shift = groupBinade(gen);
    for (int64_t i = g * 32; i < (g + 1) * 32; ++i)
      x[i] = std::ldexp(mantissa(gen), binade(gen) + shift);
  }
  return x;
}
} // namespace

TEST(E4m3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    float v = e4m3ToFloat(uint8_t(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << c;
      EXPECT_EQ(std::signbit(v), c >= 0x80) << c;
    }
    EXPECT_EQ(floatToE4m3(v), c) << c << " decodes to " << v;
  }
  EXPECT_EQ(e4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(e4m3ToFloat(0x08), std::ldexp(1.0f, -6)); // smallest normal
  EXPECT_EQ(e4m3ToFloat(0x01), std::ldexp(1.0f, -9)); // smallest subnormal
}

TEST(E4m3, RoundsToNearestEven) {
  // Normal: steps of 2^-3 in [1, 2); ties go to the even mantissa.
  EXPECT_EQ(e4m3ToFloat(floatToE4m3(1.0f + 1.0f / 16)), 1.0f);
  EXPECT_EQ(e4m3ToFloat(floatToE4m3(1.0f + 3.0f / 16)), 1.25f);
  EXPECT_EQ(e4m3ToFloat(floatToE4m3(1.0f + 1.0f / 16 + 1e-6f)), 1.125f);
  EXPECT_EQ(e4m3ToFloat(floatToE4m3(-(1.0f + 3.0f / 16))), -1.25f);
  // Carry into the exponent: 1.9375 is halfway between 1.875 (odd) and 2.
  EXPECT_EQ(e4m3ToFloat(floatToE4m3(1.9375f)), 2.0f);
  // Subnormal: steps of 2^-9.
  EXPECT_EQ(floatToE4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(floatToE4m3(std::ldexp(3.0f, -10)), 0x02);
  EXPECT_EQ(floatToE4m3(std::ldexp(15.0f, -10)), 0x08); // up to 2^-6
  EXPECT_EQ(floatToE4m3(std::ldexp(1.0f, -20)), 0x00);
  EXPECT_EQ(floatToE4m3(-0.0f), 0x80);
}

TEST(E4m3, SaturatesAndKeepsNaN) {
  EXPECT_EQ(floatToE4m3(448.0f), 0x7e);
  EXPECT_EQ(floatToE4m3(463.9f), 0x7e);
  EXPECT_EQ(floatToE4m3(464.0f), 0x7e); // would round to 480: saturate
  EXPECT_EQ(floatToE4m3(1e30f), 0x7e);
  EXPECT_EQ(floatToE4m3(-1e30f), 0xfe);
  EXPECT_EQ(floatToE4m3(INFINITY), 0x7e);
  EXPECT_EQ(floatToE4m3(-INFINITY), 0xfe);
  EXPECT_EQ(floatToE4m3(NAN), 0x7f);
  EXPECT_EQ(floatToE4m3(-NAN), 0xff);
}

TEST(Quantize, BytesPerRow) {
  EXPECT_EQ(quantGroupSize(QuantScheme::Fp8Group128F32), 128);
  EXPECT_EQ(quantGroupSize(QuantScheme::Fp8Group32Ue8m0), 32);
  EXPECT_EQ(quantScaleBytes(QuantScheme::Fp8Group128F32, 1024), 32);
  EXPECT_EQ(quantScaleBytes(QuantScheme::Fp8Group32Ue8m0, 1024), 32);
  EXPECT_EQ(quantRowBytes(QuantScheme::Fp8Group128F32, 1024), 1056);
  EXPECT_EQ(quantRowBytes(QuantScheme::Fp8Group32Ue8m0, 1024), 1056);
  EXPECT_EQ(quantRowBytes(QuantScheme::Fp8Group128F32, 7168), 7168 + 224);
  EXPECT_EQ(quantRowBytes(QuantScheme::Fp8Group32Ue8m0, 7168), 7168 + 224);
  EXPECT_EQ(quantRowBytes(QuantScheme::Fp8Group32Ue8m0, 96), 99);
  EXPECT_FALSE(checkQuantShape(QuantScheme::Fp8Group128F32, 256));
  Status e = checkQuantShape(QuantScheme::Fp8Group128F32, 96);
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, "hidden size 96 is not a multiple of the group size 128 of FP8 "
                "scheme fp8g128");
  EXPECT_FALSE(checkQuantShape(QuantScheme::Fp8Group32Ue8m0, 96));
  EXPECT_TRUE(checkQuantShape(QuantScheme::Fp8Group32Ue8m0, 100));
}

TEST(Quantize, RoundTripWithinTheDerivedBound) {
  for (QuantScheme scheme : kSchemes) {
    const int64_t n = 4096, group = quantGroupSize(scheme);
    std::vector<float> x = randomRow(n, 7);
    Quantized r = roundTrip(scheme, x);
    for (int64_t i = 0; i < n; ++i) {
      float scale = scaleOf(scheme, r.scales, i / group);
      ASSERT_LE(std::fabs(r.back[i] - x[i]), errorBound(x[i], scale))
          << quantSchemeName(scheme) << " x[" << i << "] = " << x[i];
    }
    // Dequantizing is exactly code * scale.
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(r.back[i], e4m3ToFloat(r.q[i]) * scaleOf(scheme, r.scales, i / group));
  }
}

TEST(Quantize, F32ScaleIsAmaxOver448) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i)
    x[i] = std::sin(float(i)) * 100.0f;
  x[5] = -1000.0f; // the amax of group 0, negative
  Quantized r = roundTrip(QuantScheme::Fp8Group128F32, x);
  EXPECT_EQ(scaleOf(QuantScheme::Fp8Group128F32, r.scales, 0), 1000.0f / 448.0f);
  EXPECT_EQ(r.q[5], 0xfe); // the amax element lands on -448
  EXPECT_NEAR(r.back[5], -1000.0f, 1e-3f);
}

TEST(Quantize, Ue8m0ScaleIsTheSmallestPowerOfTwoThatFits) {
  std::vector<float> amaxes;
  for (int k = -140; k <= 120; ++k)
    for (float m : {1.0f, 1.5f, 1.75f, std::nextafter(1.75f, 2.0f),
                    std::nextafter(1.75f, 1.0f), 1.99f})
      amaxes.push_back(std::ldexp(m, k)); // 1.75 * 2^k = 448 * 2^(k-8)
  amaxes.push_back(3.4e38f);
  amaxes.push_back(1e-45f);
  for (float amax : amaxes) {
    std::vector<float> x(32);
    for (int i = 0; i < 32; ++i)
      x[i] = amax * (float(32 - i) / 32) * (i % 2 ? -1 : 1);
    Quantized r = roundTrip(QuantScheme::Fp8Group32Ue8m0, x);
    int e = int(r.scales[0]) - 127;
    ASSERT_GE(e, -127);
    ASSERT_LE(e, 127);
    // amax <= 448 * 2^e, and 2^(e-1) would not do (unless clamped at -127).
    ASSERT_LE(double(amax), 448.0 * std::ldexp(1.0, e)) << amax;
    if (e > -127) {
      ASSERT_GT(double(amax), 448.0 * std::ldexp(1.0, e - 1)) << amax;
    }
    for (int i = 0; i < 32; ++i) {
      ASSERT_LE(std::fabs(double(x[i]) / std::ldexp(1.0, e)), 448.0); // no overflow
      ASSERT_FALSE(std::isnan(r.back[i]));
      // Clamped at 2^-127, amax / scale may sit in E4M3's subnormal range.
      ASSERT_LE(std::fabs(r.back[i]), errorBound(amax, std::ldexp(1.0f, e)) + amax)
          << amax;
    }
  }
}

TEST(Quantize, ZeroGroupGivesZeroScaleAndZeros) {
  for (QuantScheme scheme : kSchemes) {
    const int64_t group = quantGroupSize(scheme);
    std::vector<float> x(2 * group, 0.0f);
    x[3] = -0.0f;
    for (int64_t i = group; i < 2 * group; ++i)
      x[i] = float(i);
    Quantized r = roundTrip(scheme, x);
    if (scheme == QuantScheme::Fp8Group128F32)
      EXPECT_EQ(scaleOf(scheme, r.scales, 0), 0.0f);
    else
      EXPECT_EQ(r.scales[0], 0); // byte 0 (2^-127) marks an all-zero group
    for (int64_t i = 0; i < group; ++i) {
      EXPECT_EQ(r.q[i], i == 3 ? 0x80 : 0x00) << i;
      EXPECT_EQ(r.back[i], 0.0f);
      EXPECT_EQ(std::signbit(r.back[i]), i == 3);
    }
    EXPECT_NE(r.q[group + 1], 0); // the next group is untouched
  }
}

TEST(Quantize, InfSaturatesAndNaNStaysPut) {
  for (QuantScheme scheme : kSchemes) {
    const int64_t group = quantGroupSize(scheme);
    std::vector<float> clean = randomRow(group, 11);
    for (float &v : clean)
      v = std::fabs(v) + 1e-3f; // no zero element
    Quantized ref = roundTrip(scheme, clean);
    std::vector<float> x = clean;
    x[1] = NAN;
    x[2] = -NAN;
    x[3] = INFINITY;
    x[4] = -INFINITY;
    Quantized r = roundTrip(scheme, x);
    // amax ignores NaN and inf: the scale and the other codes do not move,
    // as long as the replaced elements were not the amax.
    float amax = 0;
    for (int64_t i = 0; i < group; ++i)
      amax = std::max(amax, std::fabs(clean[i]));
    bool replacedAmax = false;
    for (int i = 1; i <= 4; ++i)
      replacedAmax |= clean[i] == amax;
    ASSERT_FALSE(replacedAmax);
    EXPECT_EQ(r.scales, ref.scales) << quantSchemeName(scheme);
    for (int64_t i = 5; i < group; ++i)
      EXPECT_EQ(r.q[i], ref.q[i]);
    EXPECT_EQ(r.q[1], 0x7f);
    EXPECT_EQ(r.q[2], 0xff);
    EXPECT_EQ(r.q[3], 0x7e);
    EXPECT_EQ(r.q[4], 0xfe);
    EXPECT_TRUE(std::isnan(r.back[1]));
    EXPECT_TRUE(std::isnan(r.back[2]));
    float scale = scaleOf(scheme, r.scales, 0);
    EXPECT_EQ(r.back[3], 448.0f * scale);
    EXPECT_EQ(r.back[4], -448.0f * scale);
    for (int64_t i = 5; i < group; ++i)
      EXPECT_FALSE(std::isnan(r.back[i]));
  }
  // A group of only NaN, inf and zeros: scale 0 (f32), nothing divides by it.
  std::vector<float> x(128, 0.0f);
  x[0] = NAN;
  x[1] = INFINITY;
  Quantized r = roundTrip(QuantScheme::Fp8Group128F32, x);
  EXPECT_EQ(scaleOf(QuantScheme::Fp8Group128F32, r.scales, 0), 0.0f);
  EXPECT_EQ(r.q[0], 0x7f);
  EXPECT_EQ(r.q[1], 0x7e);
  EXPECT_EQ(r.q[2], 0x00);
  EXPECT_EQ(r.back[1], 0.0f);
  EXPECT_EQ(r.back[2], 0.0f);
}

TEST(Quantize, CHooksCheckTheirArguments) {
  std::vector<float> x(256, 1.0f), back(256);
  std::vector<uint8_t> q(256), scales(8);
  EXPECT_EQ(moert_quantize_row(1, x.data(), 256, q.data(), scales.data()), 0);
  EXPECT_EQ(moert_dequantize_row(1, q.data(), scales.data(), 256, back.data()), 0);
  EXPECT_EQ(back[17], 1.0f);
  EXPECT_EQ(moert_quantize_row(2, x.data(), 256, q.data(), scales.data()), 0);
  EXPECT_EQ(scales[0], 127 - 8); // 1 <= 448 * 2^-8
  EXPECT_EQ(moert_quantize_row(0, x.data(), 256, q.data(), scales.data()), 1);
  EXPECT_NE(std::string(moert_last_error()).find("unknown FP8 scheme 0"),
            std::string::npos);
  EXPECT_EQ(moert_quantize_row(1, x.data(), 200, q.data(), scales.data()), 1);
  EXPECT_EQ(std::string(moert_last_error()),
            "moert_quantize_row: hidden size 200 is not a multiple of the group size "
            "128 of FP8 scheme fp8g128");
}

namespace {
struct LocalRun {
  Collectives coll{createLocalCommunicator(), std::chrono::milliseconds(1000)};
  ExpertParallel ep{coll};
};

/// Dispatches `tokens` rows of `x` (f32 or bf16 bytes) to one rank holding
/// two experts, every token to both.
Status dispatchOnOneRank(LocalRun &run, QuantScheme scheme, int64_t elementBytes,
                         const std::vector<uint8_t> &x, int64_t tokens,
                         int64_t hidden, std::vector<uint8_t> &rx, int64_t &rows) {
  static int32_t ids[64], expertRank[2] = {0, 0};
  static float weights[64];
  for (int i = 0; i < 64; ++i) {
    ids[i] = i % 2;
    weights[i] = 0.5f;
  }
  std::vector<int32_t> rid;
  std::vector<float> rw;
  DispatchInput in;
  in.x = x.data();
  in.tokens = tokens;
  in.hidden = hidden;
  in.elementBytes = elementBytes;
  in.xRowStride = hidden;
  in.expertIds = ids;
  in.weights = weights;
  in.topK = 2;
  in.expertRank = expertRank;
  in.experts = 2;
  in.capacity = tokens;
  in.quant = scheme;
  int64_t handle = 0;
  return run.ep.dispatch(
      in,
      [&](int64_t n) {
        rx.resize(n * hidden * elementBytes);
        rid.resize(n * 2);
        rw.resize(n * 2);
        return DispatchOutput{rx.data(), rid.data(), rw.data()};
      },
      rows, handle);
}
} // namespace

TEST(ExpertParallel, Fp8DispatchDeliversTheDequantizedRows) {
  const int64_t tokens = 5, hidden = 256, k = 2;
  for (QuantScheme scheme : kSchemes)
    for (int64_t elementBytes : {4, 2}) {
      LocalRun run;
      std::vector<float> values = randomRow(tokens * hidden, 5);
      std::vector<uint8_t> x(tokens * hidden * elementBytes);
      for (int64_t i = 0; i < tokens * hidden; ++i) {
        storeElement(x.data() + i * elementBytes, elementBytes, values[i]);
        values[i] = loadElement(x.data() + i * elementBytes, elementBytes);
      }
      std::vector<uint8_t> rx;
      int64_t rows = 0;
      ASSERT_FALSE(dispatchOnOneRank(run, scheme, elementBytes, x, tokens, hidden,
                                     rx, rows));
      ASSERT_EQ(rows, tokens);
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<float> row(values.begin() + t * hidden,
                               values.begin() + (t + 1) * hidden);
        Quantized r = roundTrip(scheme, row);
        for (int64_t h = 0; h < hidden; ++h) {
          uint8_t expect[4];
          storeElement(expect, elementBytes, r.back[h]);
          ASSERT_EQ(std::memcmp(rx.data() + (t * hidden + h) * elementBytes, expect,
                                elementBytes),
                    0)
              << quantSchemeName(scheme) << " bytes " << elementBytes << " [" << t
              << "," << h << "]";
        }
      }
      auto &totals = run.coll.counters().totals;
      EXPECT_EQ(totals["dispatch_payload_bytes_sent"],
                tokens * (quantRowBytes(scheme, hidden) + k * 6));
      EXPECT_EQ(totals["dispatch_payload_bytes_unquantized"],
                tokens * (hidden * elementBytes + k * 6));
      EXPECT_EQ(totals["dispatch_quantization"], int64_t(scheme));
    }
}

TEST(ExpertParallel, Fp8DispatchNeedsWholeGroups) {
  LocalRun run;
  std::vector<uint8_t> x(2 * 96 * 4, 0), rx;
  int64_t rows = 0;
  Status e = dispatchOnOneRank(run, QuantScheme::Fp8Group128F32, 4, x, 2, 96, rx, rows);
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, "rank 0: dispatch: hidden size 96 is not a multiple of the group size 128 "
                "of FP8 scheme fp8g128");
  EXPECT_EQ(run.coll.counters().collectives.count("dispatch.counts"), 0u);
  EXPECT_FALSE(dispatchOnOneRank(run, QuantScheme::Fp8Group32Ue8m0, 4, x, 2, 96, rx, rows));
  EXPECT_EQ(run.coll.counters().totals["dispatch_payload_bytes_sent"], 2 * (96 + 3 + 2 * 6));
}

// The fuzz target (fuzz/fp8_quantize_fuzzer.cpp) checks the documented
// limit: only |x| >= 15/16 x 2^128 may dequantize to inf (UE8M0: FLT_MAX /
// 2^120 rounds to 256 and 256 x 2^120 = 2^128). Just below it, in the same
// group as FLT_MAX, every value decodes finite and within the bound.
TEST(Quantize, OnlyTheDocumentedTopRangeDequantizesToInf) {
  const float top = std::numeric_limits<float>::max();
  const float below = std::nextafter(0x1.ep127f, 0.0f);
  for (QuantScheme scheme : kSchemes) {
    const int64_t n = quantGroupSize(scheme);
    std::vector<float> x(n, 1.0f);
    x[0] = top;
    x[1] = below;
    x[2] = -below;
    x[3] = 3.0e38f;
    Quantized r = roundTrip(scheme, x);
    const float scale = scaleOf(scheme, r.scales, 0);
    EXPECT_TRUE(std::isinf(r.back[0]) || std::fabs(r.back[0] - top) <= errorBound(top, scale))
        << quantSchemeName(scheme);
    EXPECT_FALSE(std::signbit(r.back[0]));
    for (int64_t i = 1; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(r.back[i]))
          << quantSchemeName(scheme) << " x[" << i << "] = " << x[i] << " -> " << r.back[i];
      EXPECT_LE(std::fabs(r.back[i] - x[i]), errorBound(x[i], scale))
          << quantSchemeName(scheme) << " x[" << i << "] = " << x[i];
    }
  }
}
