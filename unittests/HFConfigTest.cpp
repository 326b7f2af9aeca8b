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
} // namespace
