//===- ChunkPlanTest.cpp - chunk planning without IR ----------------------===//
#include "moe/Dialect/MoE/Analysis/ChunkPlan.h"

#include "gtest/gtest.h"

using namespace mlir::moe;

namespace {
LayerShape deepseekLike() {
  LayerShape s;
  s.hidden = 7168;
  s.intermediate = 2048;
  s.experts = 256;
  s.topK = 8;
  s.ep = 8;
  s.elementBytes = 2;
  s.sharedIntermediate = 2048;
  return s;
}
} // namespace

TEST(ChunkPlan, BuffersAddUpToBytesPerToken) {
  LayerShape s = deepseekLike();
  int64_t sum = 0;
  for (const BufferFootprint &b : moeBuffers(s)) {
    EXPECT_GT(b.bytesPerToken, 0) << b.name;
    EXPECT_FALSE(b.formula.empty()) << b.name;
    sum += b.bytesPerToken;
  }
  EXPECT_EQ(sum, moeBytesPerToken(s));
}

TEST(ChunkPlan, ExpertIntermediatesFollowTheFormula) {
  LayerShape s = deepseekLike();
  for (const BufferFootprint &b : moeBuffers(s))
    if (b.name == "experts.gate_up") // tokens x top-k x 2 x intermediate, per received row
      EXPECT_EQ(b.bytesPerToken, s.ep * s.topK * 2 * s.intermediate * (4 + 2));
}

TEST(ChunkPlan, Bf16RowsCountTheirF32Copy) {
  // The GEMMs widen bf16 rows (gate/up's H wide, down's I wide) to f32.
  LayerShape s = deepseekLike();
  int64_t copies = 0;
  for (const BufferFootprint &b : moeBuffers(s))
    if (b.name == "experts.f32_rows")
      copies += b.bytesPerToken;
  EXPECT_EQ(copies, s.ep * s.topK * (s.hidden + s.intermediate) * 4);
  s.elementBytes = 4;
  for (const BufferFootprint &b : moeBuffers(s))
    EXPECT_NE(b.name, "experts.f32_rows");
}

TEST(ChunkPlan, ChunkIsTheLargestThatFits) {
  LayerShape s = deepseekLike();
  int64_t perToken = moeBytesPerToken(s);
  std::string error;
  auto plan = planChunks(s, 256 * perToken + perToken - 1, 4096, error);
  ASSERT_TRUE(plan) << error;
  EXPECT_EQ(plan->chunkSize, 256);
  EXPECT_EQ(plan->maxChunks, 16);
  EXPECT_TRUE(plan->chunked);
  EXPECT_LE(plan->chunkSize * perToken, 256 * perToken + perToken - 1);
}

TEST(ChunkPlan, NoChunkingWhenEverythingFits) {
  LayerShape s = deepseekLike();
  std::string error;
  auto plan = planChunks(s, int64_t(1) << 50, 4096, error);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->chunkSize, 4096);
  EXPECT_EQ(plan->maxChunks, 1);
  EXPECT_FALSE(plan->chunked);
}

TEST(ChunkPlan, BudgetBelowOneTokenIsAnError) {
  LayerShape s = deepseekLike();
  std::string error;
  EXPECT_FALSE(planChunks(s, moeBytesPerToken(s) - 1, 4096, error));
  EXPECT_NE(error.find("does not fit one token"), std::string::npos);
}

TEST(ChunkPlan, MoreRanksMeanMoreReceiveBuffers) {
  LayerShape one = deepseekLike(), many = deepseekLike();
  one.ep = 1;
  many.ep = 64;
  EXPECT_LT(moeBytesPerToken(one), moeBytesPerToken(many));
}

// Issue 9: a rank of 0 tokens (a static 0-token layer) plans one chunk size
// of 1 and no chunk, instead of dividing by a chunk size of 0.
TEST(ChunkPlan, ZeroTokensPlanNoChunk) {
  LayerShape s = deepseekLike();
  std::string error;
  auto plan = planChunks(s, int64_t(1) << 40, 0, error);
  ASSERT_TRUE(plan) << error;
  EXPECT_EQ(plan->chunkSize, 1);
  EXPECT_EQ(plan->maxChunks, 0);
  EXPECT_FALSE(plan->chunked);
}

// Issue 9: sizes near 2^62 are an error, not a wrapped plan.
TEST(ChunkPlan, HugeSizesAreAnError) {
  for (int64_t LayerShape::*field :
       {&LayerShape::hidden, &LayerShape::intermediate, &LayerShape::experts,
        &LayerShape::topK, &LayerShape::ep, &LayerShape::sharedIntermediate}) {
    LayerShape s = deepseekLike();
    s.*field = int64_t(1) << 62;
    std::string error;
    EXPECT_FALSE(planChunks(s, INT64_MAX, 4096, error));
    EXPECT_NE(error.find("outside"), std::string::npos) << error;
    EXPECT_TRUE(moeBuffers(s).empty());
    EXPECT_EQ(moeBytesPerToken(s), -1);
  }
  std::string error;
  EXPECT_FALSE(planChunks(deepseekLike(), INT64_MAX, int64_t(1) << 62, error));
  EXPECT_NE(error.find("max tokens per rank"), std::string::npos) << error;
  EXPECT_FALSE(planChunks(deepseekLike(), INT64_MAX, -1, error));
  EXPECT_FALSE(planChunks(deepseekLike(), 0, 16, error));
}

// The largest layer within the limits plans without overflow.
TEST(ChunkPlan, LargestShapeWithinLimitsPlans) {
  LayerShape s;
  s.hidden = s.intermediate = s.experts = s.sharedIntermediate = int64_t(1) << 20;
  s.topK = 1024;
  s.ep = int64_t(1) << 16;
  s.elementBytes = 8;
  EXPECT_FALSE(checkLayerShape(s));
  EXPECT_GT(moeBytesPerToken(s), 0);
  std::string error;
  EXPECT_TRUE(planChunks(s, INT64_MAX, int64_t(1) << 31, error)) << error;
}
