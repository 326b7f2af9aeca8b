//===- HFConfigTest.cpp - config.json parsing -----------------------------===//
#include "moe/Import/HFConfig.h"

#include "gtest/gtest.h"

using namespace mlir::moe;

namespace {
std::string errorOf(llvm::StringRef json) {
  auto config = parseHFConfig(json);
  if (config)
    return "";
  return llvm::toString(config.takeError());
}

constexpr const char *kQwen = R"({"model_type": "qwen3_moe", "hidden_size": 64,
  "moe_intermediate_size": 32, "num_experts": 16, "num_experts_per_tok": 4,
  "norm_topk_prob": true})";

TEST(HFConfig, ParsesQwen3Moe) {
  auto config = parseHFConfig(kQwen);
  ASSERT_TRUE(static_cast<bool>(config)) << llvm::toString(config.takeError());
  EXPECT_EQ(config->hiddenSize, 64);
  EXPECT_EQ(config->intermediateSize, 32);
  EXPECT_EQ(config->numExperts, 16);
  EXPECT_EQ(config->topK, 4);
  EXPECT_EQ(config->score, ScoreFunction::softmax);
  EXPECT_TRUE(config->normalize);
  EXPECT_EQ(config->sharedIntermediateSize, 0);
  EXPECT_FALSE(config->correctionBias);
}

TEST(HFConfig, ParsesDeepSeekV3) {
  auto config = parseHFConfig(R"({"model_type": "deepseek_v3", "hidden_size": 7168,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "norm_topk_prob": true,
    "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "topk_method": "noaux_tc"})");
  ASSERT_TRUE(static_cast<bool>(config)) << llvm::toString(config.takeError());
  EXPECT_EQ(config->score, ScoreFunction::sigmoid);
  EXPECT_EQ(config->nGroup, 8);
  EXPECT_EQ(config->topkGroup, 4);
  EXPECT_DOUBLE_EQ(config->scale, 2.5);
  EXPECT_TRUE(config->correctionBias);
  EXPECT_EQ(config->sharedIntermediateSize, 2048);
}

TEST(HFConfig, MissingFieldNamesItsPath) {
  EXPECT_EQ(errorOf(R"({"model_type": "qwen3_moe", "moe_intermediate_size": 32,
    "num_experts": 16, "num_experts_per_tok": 4})"),
            "$.hidden_size: missing required field (an integer)");
}

TEST(HFConfig, WrongTypeNamesItsPath) {
  EXPECT_EQ(errorOf(R"({"model_type": "qwen3_moe", "hidden_size": 64,
    "moe_intermediate_size": 32, "num_experts": "16", "num_experts_per_tok": 4})"),
            "$.num_experts: expected an integer, got \"16\"");
  EXPECT_EQ(errorOf(R"({"model_type": "qwen3_moe", "hidden_size": 64,
    "moe_intermediate_size": 32, "num_experts": 16, "num_experts_per_tok": 4,
    "norm_topk_prob": 1})"),
            "$.norm_topk_prob: expected a boolean, got 1");
}

TEST(HFConfig, RejectsNonPositiveSizes) {
  EXPECT_EQ(errorOf(R"({"model_type": "mixtral", "hidden_size": 0,
    "intermediate_size": 32, "num_local_experts": 8, "num_experts_per_tok": 2})"),
            "$.hidden_size: must be a positive integer, got 0");
}

TEST(HFConfig, RejectsUnknownModelsAndValues) {
  EXPECT_NE(errorOf(R"({"model_type": "llama", "hidden_size": 64,
    "num_experts_per_tok": 2})").find("$.model_type: unsupported"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"model_type": "deepseek_v3", "hidden_size": 64,
    "moe_intermediate_size": 32, "n_routed_experts": 16, "num_experts_per_tok": 2,
    "scoring_func": "relu"})").find("$.scoring_func"),
            std::string::npos);
  EXPECT_EQ(errorOf("[1, 2]"), "$: expected a JSON object at the top level");
  EXPECT_NE(errorOf("{").find("not valid JSON"), std::string::npos);
}
// Regression tests of hostile configs (issue 9).
TEST(HFConfig, NestedJsonIsAnErrorNotAStackOverflow) {
  std::string deep(200000, '[');
  EXPECT_NE(errorOf(deep).find("nests deeper than 64 levels"), std::string::npos);
  std::string object = "{\"a\": " + std::string(100, '[') + "}";
  EXPECT_NE(errorOf(object).find("nests deeper"), std::string::npos);
  // Brackets inside strings do not count.
  std::string quoted = R"({"model_type": ")" + std::string(100, '[') + R"("})";
  EXPECT_EQ(errorOf(quoted), "$.hidden_size: missing required field (an integer)");
}

TEST(HFConfig, SizesAboveTheLimitsNameTheirPath) {
  EXPECT_EQ(errorOf(R"({"model_type": "qwen3_moe", "hidden_size": 4611686018427387904,
    "moe_intermediate_size": 32, "num_experts": 16, "num_experts_per_tok": 4})"),
            "$.hidden_size: must be in [1, 1048576], got 4611686018427387904");
  EXPECT_EQ(errorOf(R"({"model_type": "mixtral", "hidden_size": 64,
    "intermediate_size": 32, "num_local_experts": 2000000, "num_experts_per_tok": 2})"),
            "$.num_local_experts: must be in [1, 1048576], got 2000000");
  EXPECT_EQ(errorOf(R"({"model_type": "mixtral", "hidden_size": 64,
    "intermediate_size": 32, "num_local_experts": 8, "num_experts_per_tok": 9})"),
            "$.num_experts_per_tok: 9 is more than the 8 experts");
}

TEST(HFConfig, NegativeSharedExpertsAreRejected) {
  EXPECT_EQ(errorOf(R"({"model_type": "deepseek_v3", "hidden_size": 64,
    "moe_intermediate_size": 32, "n_routed_experts": 16, "num_experts_per_tok": 2,
    "n_shared_experts": -2})"),
            "$.n_shared_experts: must be in [0, 32768], got -2");
}

TEST(HFConfig, GroupsOutsideTheExpertsAreRejected) {
  EXPECT_EQ(errorOf(R"({"model_type": "deepseek_v3", "hidden_size": 64,
    "moe_intermediate_size": 32, "n_routed_experts": 16, "num_experts_per_tok": 2,
    "n_group": 4, "topk_group": 5})"),
            "$.topk_group: must be in [1, 4], got 5");
  EXPECT_EQ(errorOf(R"({"model_type": "deepseek_v3", "hidden_size": 64,
    "moe_intermediate_size": 32, "n_routed_experts": 16, "num_experts_per_tok": 2,
    "n_group": 0})"),
            "$.n_group: must be a positive integer, got 0");
}

TEST(HFConfig, ScalingFactorMustStayANormalF32) {
  for (const char *scale : {"1e-50", "1e39", "0", "-2.5"})
    EXPECT_NE(errorOf(std::string(R"({"model_type": "deepseek_v3", "hidden_size": 64,
      "moe_intermediate_size": 32, "n_routed_experts": 16, "num_experts_per_tok": 2,
      "routed_scaling_factor": )") + scale + "}")
                  .find("$.routed_scaling_factor: must be a number in [1e-30, 1e+30]"),
              std::string::npos)
        << scale;
}

TEST(HFConfig, LayerPlanListsParametersWithShapesAndDtypes) {
  auto config = parseHFConfig(kQwen);
  ASSERT_TRUE(static_cast<bool>(config)) << llvm::toString(config.takeError());
  llvm::json::Value plan = layerPlan(*config, {2, 8, 1, 0}, "bf16", "layer");
  const llvm::json::Array *parameters =
      plan.getAsObject()->getObject("entry_point")->getArray("parameters");
  ASSERT_TRUE(parameters);
  std::vector<std::string> seen;
  for (const llvm::json::Value &p : *parameters) {
    const llvm::json::Object &o = *p.getAsObject();
    std::string shape;
    for (const llvm::json::Value &d : *o.getArray("shape"))
      shape += std::to_string(*d.getAsInteger()) + ",";
    seen.push_back(o.getString("name")->str() + "[" + shape + "]" +
                   o.getString("dtype")->str());
  }
  // Qwen tiny: H 64, E 16, I 32, ep 2 -> 8 local experts.
  EXPECT_EQ(seen, (std::vector<std::string>{
                      "x[-1,64,]bf16", "router_weight[16,64,]bf16",
                      "w13[8,64,64,]bf16", "w2[8,64,32,]bf16",
                      "expert_rank[16,]i32"}));
}
} // namespace
