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
  // Dots1Config has no default expert count: transformers cannot build it.
  EXPECT_EQ(errorOf(R"({"model_type": "dots1", "num_experts_per_tok": 2,
    "n_shared_experts": 1})"),
            "$.n_routed_experts: missing required field (an integer)");
  EXPECT_EQ(errorOf(R"({"model_type": "deepseek_v2", "n_routed_experts": 8})"),
            "$.num_experts_per_tok: missing required field (an integer)");
}

// A field missing from config.json means transformers' default for it.
TEST(HFConfig, MissingFieldsTakeTransformersDefaults) {
  auto v3 = parseHFConfig(R"({"model_type": "deepseek_v3"})");
  ASSERT_TRUE(static_cast<bool>(v3)) << llvm::toString(v3.takeError());
  EXPECT_EQ(v3->hiddenSize, 7168);
  EXPECT_EQ(v3->numExperts, 256);
  EXPECT_EQ(v3->topK, 8);
  EXPECT_EQ(v3->nGroup, 8);
  EXPECT_EQ(v3->topkGroup, 4);
  EXPECT_DOUBLE_EQ(v3->scale, 2.5);
  EXPECT_EQ(v3->sharedIntermediateSize, 2048);
  EXPECT_TRUE(v3->normalize);
  auto qwen = parseHFConfig(R"({"model_type": "qwen3_moe"})");
  ASSERT_TRUE(static_cast<bool>(qwen)) << llvm::toString(qwen.takeError());
  EXPECT_EQ(qwen->numExperts, 128);
  EXPECT_EQ(qwen->intermediateSize, 768);
  EXPECT_FALSE(qwen->normalize);
  auto glm = parseHFConfig(R"({"model_type": "glm4_moe"})");
  ASSERT_TRUE(static_cast<bool>(glm)) << llvm::toString(glm.takeError());
  EXPECT_DOUBLE_EQ(glm->scale, 1.0);
  EXPECT_EQ(glm->nGroup, 1);
  EXPECT_EQ(glm->sharedIntermediateSize, 1408);
}

TEST(HFConfig, AliasesAndNestedTextConfigs) {
  // transformers 5 writes Qwen3-MoE's expert count as num_local_experts.
  auto qwen = parseHFConfig(R"({"model_type": "qwen3_moe", "num_local_experts": 16})");
  ASSERT_TRUE(static_cast<bool>(qwen)) << llvm::toString(qwen.takeError());
  EXPECT_EQ(qwen->numExperts, 16);
  EXPECT_EQ(errorOf(R"({"model_type": "qwen3_moe", "num_experts": 16,
    "num_local_experts": 8})"),
            "$.num_experts (16) and $.num_local_experts (8) name the same "
            "setting with different values");
  auto ernie = parseHFConfig(R"({"model_type": "ernie4_5_moe", "moe_num_experts": 8,
    "moe_k": 2, "moe_num_shared_experts": 0})");
  ASSERT_TRUE(static_cast<bool>(ernie)) << llvm::toString(ernie.takeError());
  EXPECT_EQ(ernie->numExperts, 8);
  EXPECT_EQ(ernie->topK, 2);
  EXPECT_TRUE(ernie->correctionBias);
  EXPECT_EQ(ernie->score, ScoreFunction::softmax);
  auto vl = parseHFConfig(R"({"model_type": "qwen3_vl_moe", "text_config": {
    "model_type": "qwen3_vl_moe_text", "hidden_size": 64, "num_experts": 8,
    "num_experts_per_tok": 2, "moe_intermediate_size": 32}})");
  ASSERT_TRUE(static_cast<bool>(vl)) << llvm::toString(vl.takeError());
  EXPECT_EQ(vl->modelType, "qwen3_vl_moe_text");
  EXPECT_EQ(vl->hiddenSize, 64);
  EXPECT_TRUE(vl->normalize);
  EXPECT_EQ(errorOf(R"({"model_type": "qwen3_vl_moe", "text_config": {
    "model_type": "qwen3_vl_moe_text", "hidden_size": -1}})"),
            "$.text_config.hidden_size: must be a positive integer, got -1");
  auto kimi = parseHFConfig(R"({"model_type": "kimi_k2", "n_group": 1,
    "topk_group": 1, "routed_scaling_factor": 2.827, "n_routed_experts": 384})");
  ASSERT_TRUE(static_cast<bool>(kimi)) << llvm::toString(kimi.takeError());
  EXPECT_EQ(kimi->score, ScoreFunction::sigmoid);
  EXPECT_EQ(kimi->numExperts, 384);
}

// Every setting that changes the math is read, and one the dialect cannot
// express is an error naming its path, never a different layer.
TEST(HFConfig, MathTheDialectLacksIsRefusedByPath) {
  auto refused = [](const char *json, const char *path) {
    std::string error = errorOf(json);
    EXPECT_EQ(error.rfind(path, 0), 0u) << json << "\n-> " << error;
  };
  refused(R"({"model_type": "mixtral", "hidden_act": "gelu"})", "$.hidden_act: \"gelu\"");
  refused(R"({"model_type": "deepseek_v2", "num_experts_per_tok": 2,
    "topk_method": "group_limited_greedy"})",
          "$.n_group: missing required field");
  refused(R"({"model_type": "deepseek_v2", "num_experts_per_tok": 2,
    "topk_method": "noaux_tc"})", "$.topk_method: unknown value");
  // DeepSeek-V2's group rule: groups ranked by their best expert.
  auto v2 = parseHFConfig(R"({"model_type": "deepseek_v2", "num_experts_per_tok": 6,
    "n_routed_experts": 160, "topk_method": "group_limited_greedy", "n_group": 8,
    "topk_group": 3})");
  ASSERT_TRUE(static_cast<bool>(v2)) << llvm::toString(v2.takeError());
  EXPECT_TRUE(v2->groupMax);
  EXPECT_EQ(v2->nGroup, 8);
  EXPECT_EQ(v2->topkGroup, 3);
  refused(R"({"model_type": "deepseek_v2", "num_experts_per_tok": 2,
    "norm_topk_prob": true})", "$.norm_topk_prob:");
  refused(R"({"model_type": "deepseek_v3", "scoring_func": "softmax"})",
          "$.scoring_func: \"softmax\" is not what transformers' DeepseekV3");
  refused(R"({"model_type": "mixtral", "quantization_config": {
    "quant_method": "mxfp4"}})",
          "$.quantization_config.quant_method: \"mxfp4\" is read for gpt_oss "
          "checkpoints only");
  refused(R"({"model_type": "qwen3_moe", "quantization_config": {
    "quant_method": "awq"}})",
          "$.quantization_config.quant_method: \"awq\" is not supported yet");
  refused(R"({"model_type": "deepseek_v3", "quantization_config": {
    "quant_method": "fp8"}})",
          "$.quantization_config.weight_block_size: expected [rows, columns]");
  refused(R"({"model_type": "deepseek_v3", "quantization_config": {
    "quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128]}})",
          "$.quantization_config.fmt: \"e5m2\" is not supported");
  // DeepSeek-V3's own format: dequantized when the checkpoint is read.
  auto fp8 = parseHFConfig(R"({"model_type": "deepseek_v3", "quantization_config": {
    "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
    "weight_block_size": [128, 64]}})");
  ASSERT_TRUE(static_cast<bool>(fp8)) << llvm::toString(fp8.takeError());
  ASSERT_TRUE(fp8->fp8WeightBlocks.has_value());
  EXPECT_EQ(fp8->fp8WeightBlocks->first, 128);
  EXPECT_EQ(fp8->fp8WeightBlocks->second, 64);
  refused(R"({"model_type": "phimoe"})", "$.model_type: \"phimoe\" is not supported yet");
  // DeepSeek-V3.2: the MoE layers are mlp_layer_types' "sparse" entries.
  auto v32 = parseHFConfig(R"({"model_type": "deepseek_v32", "num_hidden_layers": 4,
    "mlp_layer_types": ["dense", "sparse", "dense", "sparse"]})");
  ASSERT_TRUE(static_cast<bool>(v32)) << llvm::toString(v32.takeError());
  EXPECT_EQ(v32->moeLayers, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(v32->nGroup, 8);
  refused(R"({"model_type": "deepseek_v32", "num_hidden_layers": 2,
    "mlp_layer_types": ["dense", "moe"]})",
          "$.mlp_layer_types: expected each of \"dense\", \"sparse\", got \"moe\"");
  refused(R"({"model_type": "deepseek_v32", "num_hidden_layers": 3,
    "mlp_layer_types": ["dense", "sparse"]})",
          "$.mlp_layer_types: 2 entries for 3 layers (num_hidden_layers)");
  // MiniMax-M2: sigmoid, a correction bias, always renormalised.
  auto m2 = parseHFConfig(R"({"model_type": "minimax_m2"})");
  ASSERT_TRUE(static_cast<bool>(m2)) << llvm::toString(m2.takeError());
  EXPECT_EQ(m2->score, ScoreFunction::sigmoid);
  EXPECT_TRUE(m2->correctionBias);
  EXPECT_TRUE(m2->normalize);
  EXPECT_EQ(m2->numExperts, 256);
  // gpt-oss: transformers' defaults, MXFP4 experts read as such.
  auto oss = parseHFConfig(R"({"model_type": "gpt_oss", "quantization_config": {
    "quant_method": "mxfp4"}, "swiglu_limit": 5.5})");
  ASSERT_TRUE(static_cast<bool>(oss)) << llvm::toString(oss.takeError());
  EXPECT_EQ(oss->hiddenSize, 2880);
  EXPECT_EQ(oss->numExperts, 128);
  EXPECT_EQ(oss->topK, 4);
  EXPECT_TRUE(oss->normalize);
  EXPECT_TRUE(oss->routerBias);
  EXPECT_TRUE(oss->expertBias);
  EXPECT_TRUE(oss->mxfp4Experts);
  EXPECT_EQ(oss->activation, Activation::clamped_swiglu);
  EXPECT_DOUBLE_EQ(oss->swigluAlpha, 1.702);
  EXPECT_DOUBLE_EQ(oss->swigluLimit, 5.5);
  EXPECT_EQ(oss->moeLayers.size(), 36u);
  refused(R"({"model_type": "gpt_oss", "swiglu_limit": 0})", "$.swiglu_limit:");
  refused(R"({"model_type": "llama4", "text_config": {"model_type": "llama4_text",
    "num_experts_per_tok": 2}})",
          "$.text_config.num_experts_per_tok: 2: Llama 4's routing weight scales");
  // Llama 4 (top-1): the score scales the expert's input; the MoE layers
  // are every interleave_moe_layer_step-th.
  auto llama4 = parseHFConfig(R"({"model_type": "llama4", "text_config": {
    "model_type": "llama4_text", "num_hidden_layers": 6, "interleave_moe_layer_step": 2}})");
  ASSERT_TRUE(static_cast<bool>(llama4)) << llvm::toString(llama4.takeError());
  EXPECT_TRUE(llama4->scoreInput);
  EXPECT_EQ(llama4->score, ScoreFunction::sigmoid);
  EXPECT_EQ(llama4->sharedIntermediateSize, llama4->intermediateSize);
  EXPECT_EQ(llama4->moeLayers, (std::vector<int64_t>{1, 3, 5}));
  refused(R"({"model_type": "ernie4_5_moe", "use_bias": true})", "$.use_bias:");
  // Qwen2-MoE's shared expert (default width 5632) is gated.
  auto qwen2 = parseHFConfig(R"({"model_type": "qwen2_moe"})");
  ASSERT_TRUE(static_cast<bool>(qwen2)) << llvm::toString(qwen2.takeError());
  EXPECT_EQ(qwen2->sharedIntermediateSize, 5632);
  EXPECT_TRUE(qwen2->sharedGate);
  // A Qwen2-MoE without a shared expert is a plain softmax layer.
  auto plain = parseHFConfig(R"({"model_type": "qwen2_moe",
    "shared_expert_intermediate_size": 0, "norm_topk_prob": true})");
  ASSERT_TRUE(static_cast<bool>(plain)) << llvm::toString(plain.takeError());
  EXPECT_TRUE(plain->normalize);
  EXPECT_EQ(plain->sharedIntermediateSize, 0);
  EXPECT_FALSE(plain->sharedGate);
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
  EXPECT_NE(errorOf(quoted).find("$.model_type: unsupported MoE model type"),
            std::string::npos);
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
