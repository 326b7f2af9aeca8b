//===- RuntimeTest.cpp - runtime pieces on one rank -----------------------===//
#include "Collectives.h"
#include "Counters.h"
#include "ExpertParallel.h"
#include "LocalCommunicator.h"
#include "moert/moert.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <string>

using namespace moert;

TEST(Bf16, RoundsToNearestEven) {
  uint8_t out[2];
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to even (1.0).
  storeElement(out, 2, 1.0f + std::ldexp(1.0f, -8));
  EXPECT_EQ(loadElement(out, 2), 1.0f);
  storeElement(out, 2, 1.0f + 3 * std::ldexp(1.0f, -8));
  EXPECT_EQ(loadElement(out, 2), 1.0f + std::ldexp(1.0f, -6));
  storeElement(out, 2, -2.5f);
  EXPECT_EQ(loadElement(out, 2), -2.5f);
  storeElement(out, 2, NAN);
  EXPECT_TRUE(std::isnan(loadElement(out, 2)));
}

namespace {
/// Experts scale their input: expert e computes (e + 1) * x.
struct LocalRun {
  Collectives coll{createLocalCommunicator(), std::chrono::milliseconds(1000)};
  ExpertParallel ep{coll};
};

/// A dense f32 dispatch of `tokens` rows of `hidden` with top-`k` choices.
DispatchInput denseInput(const float *x, const int32_t *ids, const float *weights,
                         const int32_t *expertRank, int64_t tokens, int64_t hidden,
                         int64_t k, int64_t experts, int64_t capacity) {
  DispatchInput in;
  in.x = reinterpret_cast<const uint8_t *>(x);
  in.tokens = tokens;
  in.hidden = hidden;
  in.xRowStride = hidden;
  in.expertIds = ids;
  in.weights = weights;
  in.topK = k;
  in.expertRank = expertRank;
  in.experts = experts;
  in.capacity = capacity;
  return in;
}
} // namespace

TEST(ExpertParallel, OneRankRoundTrip) {
  LocalRun run;
  const int64_t tokens = 3, hidden = 2, k = 2, experts = 4;
  float x[tokens * hidden] = {1, 2, 3, 4, 5, 6};
  int32_t ids[tokens * k] = {0, 3, 2, 1, 3, 0};
  float weights[tokens * k] = {0.5f, 0.25f, 1.0f, 2.0f, 0.125f, 4.0f};
  int32_t expertRank[experts] = {0, 0, 0, 0};
  DispatchInput in =
      denseInput(x, ids, weights, expertRank, tokens, hidden, k, experts, tokens);
  std::vector<float> rx;
  std::vector<int32_t> rid;
  std::vector<float> rw;
  int64_t rows = 0, handle = -1;
  ASSERT_FALSE(run.ep.dispatch(
      in,
      [&](int64_t n) {
        rx.resize(n * hidden);
        rid.resize(n * k);
        rw.resize(n * k);
        return DispatchOutput{reinterpret_cast<uint8_t *>(rx.data()), rid.data(),
                              rw.data()};
      },
      rows, handle));
  ASSERT_EQ(rows, tokens); // one row per (token, rank): dedupe
  std::vector<float> partial(rows * hidden, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t h = 0; h < hidden; ++h)
        partial[r * hidden + h] += rw[r * k + j] * (rid[r * k + j] + 1) * rx[r * hidden + h];
  std::vector<float> y(tokens * hidden);
  int64_t outTokens = 0;
  ASSERT_FALSE(run.ep.combine(handle, reinterpret_cast<uint8_t *>(partial.data()), rows,
                              reinterpret_cast<uint8_t *>(y.data()), outTokens));
  ASSERT_EQ(outTokens, tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    float scale = 0;
    for (int64_t j = 0; j < k; ++j)
      scale += weights[t * k + j] * (ids[t * k + j] + 1);
    for (int64_t h = 0; h < hidden; ++h)
      EXPECT_FLOAT_EQ(y[t * hidden + h], scale * x[t * hidden + h]);
  }
  EXPECT_EQ(run.coll.counters().totals["dispatch_rows_sent"], tokens);
  EXPECT_EQ(run.coll.counters().collectives["dispatch.payload"].calls, 1);
}

TEST(ExpertParallel, RejectsBadExpertIdsByName) {
  LocalRun run;
  float x[2] = {1, 2};
  int32_t ids[1] = {7};
  float weights[1] = {1};
  int32_t expertRank[2] = {0, 0};
  DispatchInput in = denseInput(x, ids, weights, expertRank, 1, 2, 1, 2, 1);
  int64_t rows, handle;
  Status error = run.ep.dispatch(in, [](int64_t) { return DispatchOutput(); }, rows, handle);
  ASSERT_TRUE(error);
  EXPECT_EQ(*error, "rank 0: dispatch: expert_ids[0,0] = 7 is not an expert of the 2 "
                    "(ids 0 to 1)");
}

TEST(ExpertParallel, TokensOverThePlanFailBeforeAnyCollective) {
  LocalRun run;
  float x[4] = {1, 2, 3, 4};
  int32_t ids[2] = {0, 1};
  float weights[2] = {1, 1};
  int32_t expertRank[2] = {0, 0};
  DispatchInput in = denseInput(x, ids, weights, expertRank, 2, 2, 1, 2, 8);
  in.maxTokens = 1;
  bool allocated = false;
  int64_t rows, handle;
  Status error = run.ep.dispatch(
      in, [&](int64_t) { allocated = true; return DispatchOutput(); }, rows, handle);
  ASSERT_TRUE(error);
  EXPECT_EQ(*error, "rank 0: dispatch: 2 tokens but the plan allows at most 1 per "
                    "rank; nothing was written");
  EXPECT_FALSE(allocated);
  EXPECT_TRUE(run.coll.counters().collectives.empty());
}

TEST(ExpertParallel, DecodeLayoutMasksUnusedSlots) {
  LocalRun run;
  float x[4] = {1, 2, 3, 4};
  int32_t ids[2] = {1, 0};
  float weights[2] = {0.5f, 0.25f};
  int32_t expertRank[2] = {0, 0};
  DispatchInput in = denseInput(x, ids, weights, expertRank, 2, 2, 1, 2, 8);
  in.slots = 3;
  std::vector<float> rx(3 * 2, -1.0f), rw(3, -1.0f);
  std::vector<int32_t> rid(3, 7);
  int64_t rows, handle;
  ASSERT_FALSE(run.ep.dispatch(
      in,
      [&](int64_t n) {
        EXPECT_EQ(n, 3);
        return DispatchOutput{reinterpret_cast<uint8_t *>(rx.data()), rid.data(),
                              rw.data()};
      },
      rows, handle));
  EXPECT_EQ(rows, 3);
  EXPECT_EQ(rx, (std::vector<float>{1, 2, 3, 4, 0, 0}));
  EXPECT_EQ(rid, (std::vector<int32_t>{1, 0, -1}));
  EXPECT_EQ(rw, (std::vector<float>{0.5f, 0.25f, 0.0f}));
  EXPECT_EQ(run.coll.counters().collectives.count("dispatch.counts"), 0u);
  // Workspaces are planned from the slots, not from this call's tokens.
  const int64_t rowBytes = 2 * 4 + 1 * 6; // x, an int16 id, an f32 weight
  EXPECT_EQ(run.coll.counters().plannedBytes["dispatch.send"], 3 * rowBytes);
  EXPECT_EQ(run.coll.counters().highWaterBytes["dispatch.send"], 3 * rowBytes);
  // Combine sums only the valid rows of each block.
  float partial[6] = {10, 20, 30, 40, 99, 99};
  float y[4];
  int64_t tokens;
  ASSERT_FALSE(run.ep.combine(handle, reinterpret_cast<uint8_t *>(partial), 3,
                              reinterpret_cast<uint8_t *>(y), tokens));
  EXPECT_EQ(tokens, 2);
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{10, 20, 30, 40}));
}

TEST(ExpertParallel, OverCapacityFailsBeforeWriting) {
  LocalRun run;
  float x[4] = {1, 2, 3, 4};
  int32_t ids[2] = {0, 1};
  float weights[2] = {1, 1};
  int32_t expertRank[2] = {0, 0};
  DispatchInput in = denseInput(x, ids, weights, expertRank, 2, 2, 1, 2, 1);
  bool allocated = false;
  int64_t rows, handle;
  Status error = run.ep.dispatch(
      in, [&](int64_t) { allocated = true; return DispatchOutput(); }, rows, handle);
  ASSERT_TRUE(error);
  EXPECT_NE(error->find("rank 0 would receive 2 rows but the plan's capacity is 1"),
            std::string::npos);
  EXPECT_FALSE(allocated);
  EXPECT_EQ(run.coll.counters().collectives.count("dispatch.payload"), 0u);
}

TEST(CApi, LocalBackendCountersAndErrors) {
  EXPECT_NE(moert_init("carrier-pigeon", 100), 0);
  EXPECT_NE(std::string(moert_last_error()).find("unknown backend 'carrier-pigeon'"),
            std::string::npos);
  ASSERT_EQ(moert_init("local", 100), 0);
  EXPECT_EQ(moert_size(), 1);
  int64_t v[2] = {3, 4};
  ASSERT_EQ(moert_allreduce_i64("test.sum", v, 2, 0), 0);
  EXPECT_EQ(v[0], 3);
  char json[4096];
  ASSERT_GT(moert_counters_json(json, sizeof(json)), 0);
  EXPECT_NE(std::string(json).find("\"test.sum\": {\"calls\": 1"), std::string::npos);
  moert_finalize();
}

TEST(Counters, PeerWaitIsTheDispatchAndCombineCollectivesWait) {
  Counters c;
  c.phaseSeconds["dispatch"] = 0.25;
  c.phaseSeconds["combine"] = 0.5;
  c.computeNs = 250000000;
  c.collectives["dispatch.payload"].waitSeconds = 0.125;
  c.collectives["combine.payload"].waitSeconds = 0.25;
  c.collectives["tp.gather"].waitSeconds = 1.0; // not a phase of the layer's EP
  std::string json = c.toJson(0, 2, "local");
  EXPECT_NE(json.find("\"peer_wait_ns\": 375000000"), std::string::npos) << json;
  EXPECT_NE(json.find("\"transfer_share\": 0.75"), std::string::npos) << json;
  EXPECT_NE(json.find("\"transfer_share_without_wait\": 0.375"), std::string::npos) << json;
  EXPECT_NE(json.find("\"wait_seconds\": 0.125"), std::string::npos) << json;
}
