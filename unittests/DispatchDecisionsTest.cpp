//===- DispatchDecisionsTest.cpp - decisions of the dispatch planning passes ===//
// The plain functions behind moe-fuse-quant-dispatch, moe-dedupe-tp-dispatch,
// moe-specialize-phase and moe-plan-buffers, called without IR. Expected
// sizes are worked out by hand in the comments.
#include "moe/Dialect/MoE/Analysis/DispatchPlan.h"
#include "moe/Dialect/MoE/Analysis/PhasePlan.h"
#include "moe/Dialect/MoE/Analysis/WorkspacePlan.h"

#include <gtest/gtest.h>

using namespace mlir::moe;

TEST(FuseQuantDecision, WireBytesPerRow) {
  // H = 1024 bf16: 2048 B; g128: 1024 codes + 8 f32 scales; g32: + 32 bytes.
  EXPECT_EQ(wireActivationBytes(WireFormat::Native, 1024, 2), 2048);
  EXPECT_EQ(wireActivationBytes(WireFormat::Fp8G128, 1024, 2), 1024 + 32);
  EXPECT_EQ(wireActivationBytes(WireFormat::Fp8G32Ue8m0, 1024, 4), 1024 + 32);
}

TEST(FuseQuantDecision, QuantizesOnlyWholeGroups) {
  EXPECT_TRUE(decideQuantization(WireFormat::Fp8G128, 256).quantize);
  QuantDecision partial = decideQuantization(WireFormat::Fp8G128, 96);
  EXPECT_FALSE(partial.quantize);
  EXPECT_EQ(partial.why, "hidden size 96 is not a multiple of 128");
  EXPECT_TRUE(decideQuantization(WireFormat::Fp8G32Ue8m0, 96).quantize);
  EXPECT_EQ(decideQuantization(WireFormat::Fp8G32Ue8m0, std::nullopt).why,
            "hidden size ? is not a multiple of 32");
  EXPECT_FALSE(decideQuantization(WireFormat::Native, 1024).quantize);
}

TEST(FuseQuantDecision, ParsesTheSchemeNames) {
  EXPECT_EQ(parseWireFormat("fp8-e4m3-g128"), WireFormat::Fp8G128);
  EXPECT_EQ(parseWireFormat("fp8-e4m3-g32-ue8m0"), WireFormat::Fp8G32Ue8m0);
  EXPECT_EQ(parseWireFormat("none"), WireFormat::Native);
  EXPECT_FALSE(parseWireFormat("int4"));
}

TEST(TpDedupeDecision, SlicesOnlyWithSeveralTpRanks) {
  EXPECT_FALSE(decideTpDedupe(1, 64).slice);
  TpDecision two = decideTpDedupe(2, 65);
  EXPECT_TRUE(two.slice);
  EXPECT_EQ(two.slicedMaxTokens, 33); // ceil(65 / 2)
  EXPECT_FALSE(decideTpDedupe(4, std::nullopt).slicedMaxTokens);
}

TEST(TpDedupeDecision, SlicesPartitionTheTokens) {
  for (int64_t tp : {2, 3, 4})
    for (int64_t tokens : {0, 1, 5, 12, 13}) {
      int64_t next = 0;
      for (int64_t j = 0; j < tp; ++j) {
        RowRange r = tpSliceRows(tokens, tp, j);
        EXPECT_EQ(r.start, next) << tokens << " tokens, tp " << tp << ", rank " << j;
        EXPECT_LE(r.size, (tokens + tp - 1) / tp);
        next += r.size;
      }
      EXPECT_EQ(next, tokens);
    }
  // 5 tokens over 4: 2, 2, 1, 0
  EXPECT_EQ(tpSliceRows(5, 4, 2).size, 1);
  EXPECT_EQ(tpSliceRows(5, 4, 3).size, 0);
}

TEST(PhaseDecision, DecodeMaximumIsCappedByTheLayer) {
  EXPECT_EQ(planPhases(8, std::nullopt).decodeMaxTokens, 8);
  EXPECT_EQ(planPhases(8, 4096).decodeMaxTokens, 8);
  EXPECT_EQ(planPhases(8, 5).decodeMaxTokens, 5);
}

TEST(PhaseDecision, EntryPicksByArgumentOrGroupMaximum) {
  EXPECT_TRUE(runsDecode(PhaseArg::Auto, 8, 8));
  EXPECT_FALSE(runsDecode(PhaseArg::Auto, 9, 8));
  EXPECT_TRUE(runsDecode(PhaseArg::Decode, 1000, 8)); // the caller decides
  EXPECT_FALSE(runsDecode(PhaseArg::Prefill, 1, 8));
}

TEST(PhaseDecision, DecodeLayoutIsStatic) {
  LayerShape shape;
  shape.experts = 16;
  shape.ep = 4;
  shape.topK = 2;
  DecodeLayout d = *decodeLayout(shape, 8);
  EXPECT_EQ(d.slotsPerPeer, 8);
  EXPECT_EQ(d.receivedRows, 32);      // 4 ranks x 8 slots
  EXPECT_EQ(d.capacityPerExpert, 32); // each received row meets an expert once
  EXPECT_EQ(d.maskedRows, 4 * 32);    // 4 local experts
  shape.ep = 1;
  DecodeLayout one = *decodeLayout(shape, 8);
  EXPECT_EQ(one.receivedRows, 8);
  EXPECT_EQ(one.maskedRows, 16 * 8);
}

TEST(PhaseDecision, WireBytesPerToken) {
  LayerShape shape;
  shape.ep = 4;
  shape.topK = 8;
  // prefill: a token reaches at most min(8, 4) = 4 ranks
  WireBytes prefill = prefillDispatchBytes(shape, 100, 10);
  EXPECT_EQ(prefill.perStepMax, 10 * 4 * 100);
  EXPECT_DOUBLE_EQ(prefill.perTokenMax, 400.0);
  // decode: 4 blocks of 8 slots whatever the tokens; 2 tokens pay 1600 B each
  WireBytes decode = decodeDispatchBytes(shape, 100, 8, 2);
  EXPECT_EQ(decode.perStepMax, 4 * 8 * 100);
  EXPECT_DOUBLE_EQ(decode.perTokenMax, 1600.0);
  shape.ep = 1;
  EXPECT_EQ(prefillDispatchBytes(shape, 100, 10).perStepMax, 0);
}

TEST(BufferPlan, PrefillWorkspacesFollowTheMaxima) {
  DispatchBounds b;
  b.ep = 4;
  b.maxTokens = 100;
  b.topK = 2;
  b.hidden = 64;
  b.elementBytes = 4;
  b.wireActivationBytes = 256;
  b.capacity = 400;
  // row: 256 + 2 * (2 + 4) = 268 B; sent: 100 * min(2, 4) = 200 rows; received: 400
  std::vector<Workspace> w = planWorkspaces(b);
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0].name, "dispatch.send");
  EXPECT_EQ(w[0].bytes, 200 * 268);
  EXPECT_EQ(w[1].name, "dispatch.recv");
  EXPECT_EQ(w[1].bytes, 400 * 268);
  EXPECT_EQ(w[2].name, "expert.rows");
  EXPECT_EQ(w[2].bytes, 400 * 256);
  EXPECT_EQ(w[3].name, "combine.recv");
  EXPECT_EQ(w[3].bytes, 200 * 256);
  EXPECT_EQ(w[0].formula, "max_tokens * min(top_k, ep) * (wire activation bytes + 6 * top_k)");
}

TEST(BufferPlan, DecodeWorkspacesAreFixedBlocks) {
  DispatchBounds b;
  b.ep = 2;
  b.maxTokens = 8;
  b.slots = 8;
  b.topK = 4;
  b.hidden = 32;
  b.elementBytes = 2;
  b.wireActivationBytes = 64;
  b.capacity = 16;
  EXPECT_EQ(plannedSendRows(b), 16);
  EXPECT_EQ(plannedReceiveRows(b), 16);
  EXPECT_EQ(dispatchRowBytes(b), 64 + 4 * 6);
  EXPECT_EQ(planWorkspaces(b)[1].formula, "ep * slots * (wire activation bytes + 6 * top_k)");
}

// Issue 9: sizes near 2^62 make the planners fail instead of wrapping into
// a wrong plan (checked arithmetic).
TEST(Overflow, DecodeLayoutFailsInsteadOfWrapping) {
  LayerShape shape;
  shape.experts = int64_t(1) << 40;
  shape.ep = 1;
  EXPECT_FALSE(decodeLayout(shape, int64_t(1) << 30));
  shape.ep = int64_t(1) << 20;
  shape.experts = shape.ep;
  EXPECT_FALSE(decodeLayout(shape, int64_t(1) << 62));
  EXPECT_FALSE(decodeLayout(shape, -1));
}

TEST(Overflow, PlannedSizesNeedI32RowIds) {
  LayerShape shape;
  shape.hidden = 64;
  shape.intermediate = 32;
  shape.experts = 8;
  shape.topK = 2;
  shape.ep = 2;
  EXPECT_FALSE(checkPlannedSizes(shape, 256));
  // 2 ranks x 2^30 tokens x 2 choices = 2^32 pairs: more than i32 row ids.
  EXPECT_TRUE(checkPlannedSizes(shape, int64_t(1) << 30));
  EXPECT_TRUE(checkPlannedSizes(shape, int64_t(1) << 62));
}

TEST(Overflow, WorkspacesOverflowToNothing) {
  DispatchBounds b;
  b.ep = 4;
  b.maxTokens = int64_t(1) << 62;
  b.topK = 8;
  b.hidden = 7168;
  b.elementBytes = 2;
  b.wireActivationBytes = 7168 * 2;
  b.capacity = int64_t(1) << 62;
  EXPECT_TRUE(planWorkspaces(b).empty());
  EXPECT_EQ(plannedSendRows(b), -1);
  ASSERT_TRUE(checkDispatchBounds(b));
  EXPECT_NE(checkDispatchBounds(b)->find("max_tokens"), std::string::npos);
  b.maxTokens = 256;
  b.capacity = 1024;
  EXPECT_FALSE(checkDispatchBounds(b));
  // A dynamic top-k (ShapedType::kDynamic = INT64_MIN) is not a size.
  b.topK = INT64_MIN;
  EXPECT_TRUE(checkDispatchBounds(b));
  EXPECT_EQ(dispatchRowBytes(b), -1);
}

TEST(Overflow, WireBytesOverflowIsInvalid) {
  LayerShape shape;
  shape.ep = 4;
  shape.topK = 8;
  EXPECT_FALSE(prefillDispatchBytes(shape, int64_t(1) << 40, int64_t(1) << 30).valid);
  EXPECT_FALSE(decodeDispatchBytes(shape, int64_t(1) << 40, int64_t(1) << 30, 1).valid);
  EXPECT_EQ(wireActivationBytes(WireFormat::Native, int64_t(1) << 62, 4), -1);
}

TEST(Overflow, TpDecisionsNeverOverflow) {
  EXPECT_EQ(*decideTpDedupe(2, INT64_MAX).slicedMaxTokens, INT64_MAX / 2 + 1);
  RowRange r = tpSliceRows(INT64_MAX, 2, 3); // past the group: empty
  EXPECT_EQ(r.size, 0);
  EXPECT_EQ(tpSliceRows(0, 4, 1).size, 0);
}
