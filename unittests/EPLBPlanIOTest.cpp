//===- EPLBPlanIOTest.cpp - Expert loads and placements as JSON -----------===//
#include "moe/EPLB/PlanIO.h"

#include "gtest/gtest.h"

using namespace mlir::moe::eplb;

namespace {
std::string errorOf(llvm::StringRef json) {
  llvm::Expected<LoadTrace> trace = parseLoadTrace(json);
  if (trace)
    return "";
  return llvm::toString(trace.takeError());
}

TEST(EPLBPlanIO, ReadsTheThreeShapes) {
  llvm::Expected<LoadTrace> flat = parseLoadTrace("[[1, 2, 3], [4, 5, 6]]");
  ASSERT_TRUE(static_cast<bool>(flat)) << llvm::toString(flat.takeError());
  EXPECT_EQ(flat->windows.size(), 1u);
  EXPECT_EQ(flat->layers(), 2);
  EXPECT_EQ(flat->experts(), 3);
  llvm::Expected<LoadTrace> windows =
      parseLoadTrace("[[[1, 2]], [[3, 4]], [[5, 6]]]");
  ASSERT_TRUE(static_cast<bool>(windows));
  EXPECT_EQ(windows->windows.size(), 3u);
  EXPECT_EQ(windows->layer(0)[2], (std::vector<double>{5, 6}));
  llvm::Expected<LoadTrace> sglang =
      parseLoadTrace(R"({"logical_count": [[0, 0], [1.5, 2]]})");
  ASSERT_TRUE(static_cast<bool>(sglang));
  EXPECT_EQ(sglang->windows[0][1], (std::vector<double>{1.5, 2}));
}

TEST(EPLBPlanIO, ErrorsNameTheJSONPath) {
  EXPECT_EQ(errorOf(R"({"logical_count": [[1, "x"]]})"),
            "$.logical_count[0][1]: expected a number, got \"x\"");
  EXPECT_EQ(errorOf("[[1, 2], [3]]"),
            "$[1]: expected 2 experts like the first layer, got 1");
  EXPECT_EQ(errorOf("[[1, -2]]"),
            "$[0][1]: expected a finite load in [0, 2^53], got -2");
  EXPECT_EQ(errorOf(R"({"counts": []})"),
            "$.logical_count: missing (expected the loads as "
            "[layers][experts] or [windows][layers][experts])");
  EXPECT_EQ(errorOf("[[[[1]]]]"),
            "$: expected [layers][experts] or [windows][layers][experts], "
            "got 4 nested arrays");
  EXPECT_EQ(errorOf("[1, 2]"),
            "$[0]: expected an array of expert loads, got 1");
  EXPECT_EQ(errorOf("[[[1, 2]], [[3, 4], [5, 6]]]"),
            "$[1]: expected 1 layers like the first window, got 2");
  EXPECT_NE(errorOf("[[1, 2"), "");
}

TEST(EPLBPlanIO, ReadsPlacementsInBothForms) {
  Topology t{4, 2, 1, 1};
  llvm::Expected<std::vector<Placement>> deepseek =
      parsePlacements(R"({"phy2log": [[0, 1, 2, 1]]})", 3, t);
  ASSERT_TRUE(static_cast<bool>(deepseek))
      << llvm::toString(deepseek.takeError());
  EXPECT_EQ((*deepseek)[0].share, (std::vector<double>{1, 0.5, 1, 0.5}));
  llvm::Expected<std::vector<Placement>> ours = parsePlacements(
      R"({"layers": [{"phy2log": [0, 1, 2, 1], "share": [1, 0.25, 1, 0.75]}]})",
      3, t);
  ASSERT_TRUE(static_cast<bool>(ours));
  EXPECT_EQ((*ours)[0].share[3], 0.75);
  llvm::Expected<std::vector<Placement>> bad =
      parsePlacements(R"({"phy2log": [[0, 1, 7, 1]]})", 3, t);
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "$.phy2log[0][2]: expected an expert id in [0, 3), got 7");
  llvm::Expected<std::vector<Placement>> missing =
      parsePlacements(R"({"phy2log": [[0, 1, 1, 1]]})", 3, t);
  ASSERT_FALSE(static_cast<bool>(missing));
  EXPECT_EQ(llvm::toString(missing.takeError()),
            "$.phy2log[0]: expert 2 has no replica");
}

TEST(EPLBPlanIO, WritesAnApplicablePlacement) {
  Placement p{{0, 1, 2, 1}, {1, 0.5, 1, 0.5}};
  llvm::json::Object o = placementJSON(p, {10, 20, 30}, 2);
  EXPECT_EQ(*o.getNumber("peak"), 40);
  EXPECT_EQ(*o.getNumber("average"), 30);
  const llvm::json::Array *log2phy = o.getArray("log2phy");
  ASSERT_TRUE(log2phy);
  EXPECT_EQ((*log2phy)[1], llvm::json::Value(llvm::json::Array{1, 3}));
  EXPECT_EQ((*o.getArray("replica_count"))[1], llvm::json::Value(2));
}
} // namespace
