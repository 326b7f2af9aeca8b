//===- HFFamilies.cpp - the MoE families a config.json may describe -------===//
//
// One entry per HuggingFace model type: the names of the fields its config
// class reads, transformers' defaults for them (a field missing from
// config.json means the default, exactly as transformers reads it), and how
// its MoE block routes. Families whose math the dialect cannot express yet
// are listed with the reason, so that they are refused by name instead of
// compiled wrong.
//
//===----------------------------------------------------------------------===//
#include "ConfigFields.h"
#include "moe/Import/HFConfig.h"
#include "moe/Support/JSONInput.h"
#include "moe/Support/Limits.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::moe;
using hf::ConfigFields;
namespace json = llvm::json;

namespace {
/// transformers' defaults of the fields every family reads.
struct Defaults {
  std::optional<int64_t> hidden, intermediate, experts, topK;
};

/// The sizes and top-k, under the family's field names.
void readSizes(ConfigFields &f, MoELayerConfig &c, hf::Names experts,
               hf::Names intermediate, hf::Names topK, const Defaults &d) {
  c.hiddenSize = f.bounded("hidden_size", d.hidden, 1, limits::kMaxHidden);
  c.numExperts = f.bounded(experts, d.experts, 1, limits::kMaxExperts);
  c.intermediateSize =
      f.bounded(intermediate, d.intermediate, 1, limits::kMaxIntermediate);
  c.topK = f.bounded(topK, d.topK, 1, limits::kMaxTopK);
}

/// Shared experts of `count` x the routed width, as one expert.
void readSharedExperts(ConfigFields &f, MoELayerConfig &c, hf::Names count,
                       std::optional<int64_t> fallback) {
  int64_t most = limits::kMaxIntermediate / std::max<int64_t>(c.intermediateSize, 1);
  c.sharedIntermediateSize =
      f.bounded(count, fallback, 0, most) * c.intermediateSize;
}

/// A field transformers' modeling code ignores for this family: accepted
/// only with the value the code hard-wires, since a config saying otherwise
/// was probably meant for other code.
void requireIgnored(ConfigFields &f, llvm::StringRef key,
                    llvm::StringRef hardWired, llvm::StringRef family) {
  if (!f.has(key))
    return;
  std::string value = f.string(key);
  if (!f.error && value != hardWired)
    f.failAt(key, llvm::formatv("\"{0}\" is not what transformers' {1} block "
                                "computes (it always uses \"{2}\"); refusing "
                                "to guess which one the model needs",
                                value, family, hardWired));
}

/// Which decoder layers hold the MoE block. `isMoE(layer)` is the family's
/// rule; num_hidden_layers has transformers' default `layers`.
template <typename Rule>
void readLayers(ConfigFields &f, MoELayerConfig &c, int64_t layers, Rule isMoE) {
  int64_t count = f.bounded("num_hidden_layers", layers, 1, limits::kMaxLayers);
  if (f.error)
    return;
  c.moeLayers.clear();
  for (int64_t layer = 0; layer < count; ++layer)
    if (isMoE(layer))
      c.moeLayers.push_back(layer);
}

/// Qwen2/3-MoE: every decoder_sparse_step-th layer, except mlp_only_layers.
void readQwenLayers(ConfigFields &f, MoELayerConfig &c, int64_t layers) {
  std::vector<int64_t> dense =
      f.integers("mlp_only_layers", 0, limits::kMaxLayers);
  llvm::sort(dense);
  int64_t step = f.bounded("decoder_sparse_step", 1, 1, limits::kMaxLayers);
  readLayers(f, c, layers, [&](int64_t layer) {
    return !std::binary_search(dense.begin(), dense.end(), layer) &&
           (layer + 1) % step == 0;
  });
}

/// DeepSeek and its kin: dense up to first_k_dense_replace.
void readFirstDenseLayers(ConfigFields &f, MoELayerConfig &c, int64_t layers,
                          int64_t firstDense) {
  int64_t first = f.bounded("first_k_dense_replace", firstDense, 0,
                            limits::kMaxLayers);
  if (f.has("moe_layer_freq") && f.integer("moe_layer_freq") != 1 && !f.error)
    f.failAt("moe_layer_freq", "only 1 (every layer after "
                               "first_k_dense_replace) is what transformers builds");
  readLayers(f, c, layers, [&](int64_t layer) { return layer >= first; });
}

const std::array<llvm::StringRef, 2> kQwenExperts = {"num_experts",
                                                     "num_local_experts"};
const std::array<llvm::StringRef, 2> kMixtralExperts = {"num_local_experts",
                                                        "num_experts"};
const std::array<llvm::StringRef, 2> kDeepSeekExperts = {"n_routed_experts",
                                                         "num_local_experts"};

// Softmax over all experts, top-k, optional renormalisation.
void readMixtral(ConfigFields &f, MoELayerConfig &c) {
  readSizes(f, c, kMixtralExperts, "intermediate_size", "num_experts_per_tok",
            {4096, 14336, 8, 2});
  c.normalize = true; // softmax of the chosen logits == renormalised softmax
  readLayers(f, c, 32, [](int64_t) { return true; });
}

void readQwen3(ConfigFields &f, MoELayerConfig &c) {
  readSizes(f, c, kQwenExperts, "moe_intermediate_size", "num_experts_per_tok",
            {2048, 768, 128, 8});
  c.normalize = f.boolean("norm_topk_prob", false);
  readQwenLayers(f, c, 24);
}

void readQwen3VLText(ConfigFields &f, MoELayerConfig &c) {
  readSizes(f, c, kQwenExperts, "moe_intermediate_size", "num_experts_per_tok",
            {2048, 1408, 60, 4});
  c.normalize = true; // Qwen3VLMoeTextTopKRouter always renormalises
  readQwenLayers(f, c, 24);
}

void readOlmoe(ConfigFields &f, MoELayerConfig &c) {
  readSizes(f, c, std::array<llvm::StringRef, 2>{"num_experts", "num_local_experts"},
            "intermediate_size", "num_experts_per_tok", {2048, 2048, 64, 8});
  c.normalize = f.boolean("norm_topk_prob", false);
  readLayers(f, c, 16, [](int64_t) { return true; });
}

/// Granite 3 MoE: softmax of the chosen logits (= renormalised softmax),
/// experts of intermediate_size.
void readGraniteMoe(ConfigFields &f, MoELayerConfig &c) {
  readSizes(f, c, kMixtralExperts, "intermediate_size", "num_experts_per_tok",
            {4096, 11008, 8, 2});
  c.normalize = true;
  readLayers(f, c, 32, [](int64_t) { return true; });
}

/// Jamba: top-k of the softmax, not renormalised; MoE in every
/// expert_layer_period-th layer from expert_layer_offset.
void readJamba(ConfigFields &f, MoELayerConfig &c) {
  readSizes(f, c, kQwenExperts, "intermediate_size", "num_experts_per_tok",
            {4096, 14336, 16, 2});
  int64_t period = f.bounded("expert_layer_period", 2, 1, limits::kMaxLayers);
  int64_t offset = f.bounded("expert_layer_offset", 1, 0, limits::kMaxLayers);
  readLayers(f, c, 32, [&](int64_t layer) { return layer % period == offset; });
}

/// Hunyuan-A13B: Mixtral's routing (the router in f32) plus a shared
/// expert of the experts' width; moe_topk as a per-layer list is refused.
void readHunyuanMoE(ConfigFields &f, MoELayerConfig &c) {
  readSizes(f, c, kQwenExperts, "intermediate_size", "moe_topk", {4096, 11008, 1, 1});
  c.normalize = true;
  c.sharedIntermediateSize = c.intermediateSize;
  readLayers(f, c, 32, [](int64_t) { return true; });
}

void readFlexOlmo(ConfigFields &f, MoELayerConfig &c) {
  readSizes(f, c, std::array<llvm::StringRef, 2>{"num_experts", "num_local_experts"},
            "intermediate_size", "num_experts_per_tok", {4096, 11008, 7, 5});
  c.normalize = f.boolean("norm_topk_prob", false);
  readLayers(f, c, 32, [](int64_t) { return true; });
}

/// MiniMax-M2: sigmoid scores, a correction bias for the choice, always
/// renormalised, no groups, no scaling, no shared expert.
void readMiniMaxM2(ConfigFields &f, MoELayerConfig &c) {
  readSizes(f, c, kMixtralExperts, "intermediate_size", "num_experts_per_tok",
            {3072, 1536, 256, 8});
  c.score = ScoreFunction::sigmoid;
  c.correctionBias = true;
  c.normalize = true;
  readLayers(f, c, 62, [](int64_t) { return true; });
}

/// Qwen2-MoE's block (also Qwen3-Next's): softmax, top-k, one shared expert
/// scaled per token by sigmoid(shared_expert_gate(x)); width 0 is no shared
/// expert. The families differ in their defaults only.
void readQwenGatedShared(ConfigFields &f, MoELayerConfig &c, const Defaults &d,
                         bool normalize, int64_t layers, int64_t sharedWidth) {
  readSizes(f, c, kQwenExperts, "moe_intermediate_size", "num_experts_per_tok", d);
  c.normalize = f.boolean("norm_topk_prob", normalize);
  readQwenLayers(f, c, layers);
  c.sharedIntermediateSize = f.bounded("shared_expert_intermediate_size", sharedWidth,
                                       0, limits::kMaxIntermediate);
  c.sharedGate = c.sharedIntermediateSize > 0;
}

void readQwen2(ConfigFields &f, MoELayerConfig &c) {
  readQwenGatedShared(f, c, {2048, 1408, 60, 4}, false, 24, 5632);
}

void readQwen3Next(ConfigFields &f, MoELayerConfig &c) {
  readQwenGatedShared(f, c, {2048, 512, 512, 10}, true, 48, 512);
}

/// Qwen3.5-MoE (text_config): the same block, always renormalised, in every
/// layer (its config has no norm_topk_prob or mlp_only_layers).
void readQwen35MoeText(ConfigFields &f, MoELayerConfig &c) {
  readSizes(f, c, kQwenExperts, "moe_intermediate_size", "num_experts_per_tok",
            {2048, 512, 256, 8});
  c.normalize = true;
  c.sharedIntermediateSize = f.bounded("shared_expert_intermediate_size", 512, 0,
                                       limits::kMaxIntermediate);
  c.sharedGate = c.sharedIntermediateSize > 0;
  readLayers(f, c, 40, [](int64_t) { return true; });
}

// Softmax, top-k on the scores (within the best groups by their best score
// for "group_limited_greedy"), weights scaled, never renormalised.
void readDeepSeekV2(ConfigFields &f, MoELayerConfig &c) {
  readSizes(f, c, kDeepSeekExperts, "moe_intermediate_size",
            "num_experts_per_tok", {4096, 1407, 64, std::nullopt});
  // DeepseekV2Moe never renormalises: a config asking for it is refused.
  if (f.boolean("norm_topk_prob", false) && !f.error)
    f.failAt("norm_topk_prob", "true is not what transformers' DeepseekV2 "
                               "block computes (it never renormalises)");
  c.scale = f.number("routed_scaling_factor", 1.0, 1e-30, 1e30);
  readSharedExperts(f, c, "n_shared_experts", 2);
  readFirstDenseLayers(f, c, 32, 0);
  std::string method = f.string("topk_method", std::string("greedy"));
  if (f.error)
    return;
  if (method == "group_limited_greedy") {
    // Groups ranked by their best expert (V2's rule); n_group has no default.
    c.groupMax = true;
    c.nGroup = f.bounded("n_group", std::nullopt, 1, std::max<int64_t>(c.numExperts, 1));
    c.topkGroup = f.bounded("topk_group", std::nullopt, 1, std::max<int64_t>(c.nGroup, 1));
    if (!f.error && c.numExperts % c.nGroup != 0)
      f.failAt("n_group", llvm::formatv("{0} groups do not divide the {1} experts",
                                        c.nGroup, c.numExperts));
    if (!f.error && c.nGroup == 1)
      c.groupMax = false; // one group: plain greedy
  } else if (method != "greedy")
    f.failAt("topk_method", "unknown value \"" + method +
                                "\" (deepseek_v2 knows \"greedy\" and "
                                "\"group_limited_greedy\")");
}

/// DeepSeek-V3.2: the MoE layers are the "sparse" entries of
/// mlp_layer_types (which transformers writes), else after
/// first_k_dense_replace.
void readMlpLayerTypes(ConfigFields &f, MoELayerConfig &c) {
  if (!f.has("mlp_layer_types") || f.error)
    return;
  std::vector<std::string> types = f.strings("mlp_layer_types", {"dense", "sparse"});
  int64_t layers = f.bounded("num_hidden_layers", std::nullopt, 1, limits::kMaxLayers);
  if (!f.error && int64_t(types.size()) != layers)
    f.failAt("mlp_layer_types", llvm::formatv("{0} entries for {1} layers (num_hidden_layers)",
                                              types.size(), layers));
  if (f.error)
    return;
  c.moeLayers.clear();
  for (size_t layer = 0; layer < types.size(); ++layer)
    if (types[layer] == "sparse")
      c.moeLayers.push_back(int64_t(layer));
}

/// DeepSeek-V3's router (also GLM-4.5 and dots1): sigmoid scores, the
/// correction bias for the choice only, group-limited by the sum of each
/// group's top 2, renormalised when asked, then scaled.
void readDeepSeekV3Like(ConfigFields &f, MoELayerConfig &c, const Defaults &d,
                        std::optional<int64_t> shared, bool normalize,
                        double scale, int64_t groups, int64_t topkGroup,
                        int64_t layers, int64_t firstDense,
                        llvm::StringRef family) {
  readSizes(f, c, kDeepSeekExperts, "moe_intermediate_size",
            "num_experts_per_tok", d);
  c.score = ScoreFunction::sigmoid;
  c.correctionBias = true;
  c.normalize = f.boolean("norm_topk_prob", normalize);
  c.scale = f.number("routed_scaling_factor", scale, 1e-30, 1e30);
  c.nGroup = f.bounded("n_group", groups, 1, std::max<int64_t>(c.numExperts, 1));
  c.topkGroup = f.bounded("topk_group", topkGroup, 1, std::max<int64_t>(c.nGroup, 1));
  if (!f.error && c.numExperts % c.nGroup != 0)
    f.failAt("n_group", llvm::formatv("{0} groups do not divide the {1} experts",
                                      c.nGroup, c.numExperts));
  if (!f.error && c.nGroup > 1 && c.numExperts / c.nGroup < 2)
    f.failAt("n_group", llvm::formatv("groups of {0} expert: a group's score "
                                      "is the sum of its top 2",
                                      c.numExperts / c.nGroup));
  readSharedExperts(f, c, "n_shared_experts", shared);
  readFirstDenseLayers(f, c, layers, firstDense);
  requireIgnored(f, "scoring_func", "sigmoid", family);
  requireIgnored(f, "topk_method", "noaux_tc", family);
}

void readDeepSeekV3(ConfigFields &f, MoELayerConfig &c) {
  readDeepSeekV3Like(f, c, {7168, 2048, 256, 8}, 1, true, 2.5, 8, 4, 61, 3,
                     "DeepseekV3");
}

void readDeepSeekV32(ConfigFields &f, MoELayerConfig &c) {
  readDeepSeekV3Like(f, c, {7168, 2048, 256, 8}, 1, true, 2.5, 8, 4, 61, 3,
                     "DeepseekV32");
  readMlpLayerTypes(f, c);
}

void readGlm4Moe(ConfigFields &f, MoELayerConfig &c) {
  readDeepSeekV3Like(f, c, {4096, 1408, 128, 8}, 1, true, 1.0, 1, 1, 46, 1,
                     "Glm4Moe");
}

void readDots1(ConfigFields &f, MoELayerConfig &c) {
  // Dots1Config has no default expert count, top-k or shared experts.
  readDeepSeekV3Like(f, c, {4608, 1408, std::nullopt, std::nullopt},
                     std::nullopt, false, 1.0, 1, 1, 62, 0, "Dots1");
}

// Softmax scores plus a correction bias for the choice, always renormalised.
void readErnie45Moe(ConfigFields &f, MoELayerConfig &c) {
  readSizes(f, c, std::array<llvm::StringRef, 2>{"moe_num_experts", "num_experts"},
            "moe_intermediate_size",
            std::array<llvm::StringRef, 2>{"moe_k", "num_experts_per_tok"},
            {2560, 1536, 64, 6});
  c.correctionBias = true;
  c.normalize = true;
  readSharedExperts(f, c, "moe_num_shared_experts", 2);
  int64_t layers = f.bounded("num_hidden_layers", 28, 1, limits::kMaxLayers);
  int64_t start = f.bounded("moe_layer_start_index", 1, 0, limits::kMaxLayers);
  int64_t end = f.bounded("moe_layer_end_index", -1, -1, limits::kMaxLayers);
  int64_t interval = f.bounded("moe_layer_interval", 1, 1, limits::kMaxLayers);
  if (end == -1)
    end = layers - 1;
  readLayers(f, c, 28, [&](int64_t layer) {
    return (layer + 1) % interval == 0 && layer >= start && layer <= end;
  });
  if (f.boolean("use_bias", false) && !f.error)
    f.failAt("use_bias", "biases in the shared expert's projections are not "
                         "supported yet");
}

/// Llama 4: sigmoid of the chosen logit, no renormalisation, the score
/// scaling the expert's input; one shared expert of the experts' width.
void readLlama4Text(ConfigFields &f, MoELayerConfig &c) {
  readSizes(f, c, "num_local_experts", "intermediate_size", "num_experts_per_tok",
            {5120, 8192, 16, 1});
  c.score = ScoreFunction::sigmoid;
  c.scoreInput = true;
  c.sharedIntermediateSize = c.intermediateSize;
  if (!f.error && c.topK != 1)
    f.failAt("num_experts_per_tok", llvm::formatv(
        "{0}: Llama 4's routing weight scales the expert's input, which is "
        "supported for top-1 routing only (every released Llama 4)", c.topK));
  // MoE layers: moe_layers, else every interleave_moe_layer_step-th layer.
  int64_t step = f.bounded("interleave_moe_layer_step", 1, 1, limits::kMaxLayers);
  std::vector<int64_t> listed = f.integers("moe_layers", 0, limits::kMaxLayers);
  llvm::sort(listed);
  bool explicitList = f.has("moe_layers");
  readLayers(f, c, 48, [&](int64_t layer) {
    return explicitList ? std::binary_search(listed.begin(), listed.end(), layer)
                        : (layer + 1) % step == 0;
  });
}

/// gpt-oss: a biased router, softmax over the chosen logits, biased
/// experts with interleaved gate/up columns (the checkpoint reader splits
/// them) and a clamped SwiGLU.
void readGptOss(ConfigFields &f, MoELayerConfig &c) {
  readSizes(f, c, kMixtralExperts, "intermediate_size",
            std::array<llvm::StringRef, 2>{"num_experts_per_tok", "experts_per_token"},
            {2880, 2880, 128, 4});
  c.normalize = true; // softmax of the chosen logits == renormalised softmax
  c.routerBias = true;
  c.expertBias = true;
  c.activation = Activation::clamped_swiglu;
  c.swigluAlpha = f.number("swiglu_alpha", 1.702, -1e30, 1e30);
  c.swigluLimit = f.number("swiglu_limit", 7.0, 1e-30, 1e30);
  readLayers(f, c, 36, [](int64_t) { return true; });
}

struct Family {
  llvm::StringRef modelType;
  void (*read)(ConfigFields &, MoELayerConfig &);
};

const Family kFamilies[] = {
    {"mixtral", readMixtral},
    // MiniMax-Text-01's MoE block is Mixtral's (its checkpoint names too).
    {"minimax", readMixtral},
    {"minimax_m2", readMiniMaxM2},
    {"qwen3_moe", readQwen3},
    {"qwen3_next", readQwen3Next},
    {"qwen3_5_moe_text", readQwen35MoeText},
    {"flex_olmo", readFlexOlmo},
    {"granitemoe", readGraniteMoe},
    {"jamba", readJamba},
    {"hunyuan_v1_moe", readHunyuanMoE},
    {"qwen3_vl_moe_text", readQwen3VLText},
    {"olmoe", readOlmoe},
    {"qwen2_moe", readQwen2},
    {"deepseek_v2", readDeepSeekV2},
    {"deepseek_v3", readDeepSeekV3},
    {"deepseek_v32", readDeepSeekV32},
    // Kimi-K2's checkpoints run DeepseekV3ForCausalLM with their own values.
    {"kimi_k2", readDeepSeekV3},
    {"glm4_moe", readGlm4Moe},
    // GLM-4.5V's language model (text_config): GLM-4.5's block and defaults.
    {"glm4v_moe_text", readGlm4Moe},
    {"dots1", readDots1},
    {"ernie4_5_moe", readErnie45Moe},
    {"llama4_text", readLlama4Text},
    {"gpt_oss", readGptOss},
};

/// Model types known to have a MoE block whose math the dialect cannot
/// express yet, and what is missing.
const std::pair<llvm::StringRef, llvm::StringRef> kNotYet[] = {
    {"phimoe", "SparseMixer routing (top-2 chosen in two masked rounds)"},
};

llvm::Error configError(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// quantization_config: FP8 (e4m3) weights in blocks with f32
/// weight_scale_inv (DeepSeek-V3's format) and MXFP4 experts (gpt-oss) are
/// dequantized when the checkpoint is read; any other scheme is refused.
llvm::Error readQuantization(const json::Value &value, MoELayerConfig &c) {
  const json::Object *q = value.getAsObject();
  if (!q)
    return configError("$.quantization_config: expected a JSON object");
  ConfigFields f(*q, "$.quantization_config");
  std::string method = f.string("quant_method", std::string("?"));
  if (!f.error && method == "mxfp4") {
    c.mxfp4Experts = true;
    return llvm::Error::success();
  }
  if (!f.error && method != "fp8")
    return configError("$.quantization_config.quant_method: \"" + method +
                       "\" is not supported yet (FP8 block-scaled weights, "
                       "quant_method \"fp8\", and MXFP4 experts, \"mxfp4\", "
                       "are)");
  std::string format = f.string("fmt", std::string("e4m3"));
  if (!f.error && format != "e4m3")
    f.failAt("fmt", "\"" + format + "\" is not supported (e4m3 is)");
  std::vector<int64_t> block = f.integers("weight_block_size", 1, 1 << 20);
  if (!f.error && block.size() != 2)
    f.failAt("weight_block_size", "expected [rows, columns] of a scale block "
                                  "(per-tensor FP8 scales are not supported)");
  if (f.error)
    return configError(*f.error);
  c.fp8WeightBlocks = std::make_pair(block[0], block[1]);
  return llvm::Error::success();
}

std::string supportedList() {
  std::string list;
  for (const Family &family : kFamilies)
    list += (list.empty() ? "" : ", ") + family.modelType.str();
  return list;
}
} // namespace

llvm::Expected<MoELayerConfig> moe::parseHFConfig(llvm::StringRef jsonText) {
  llvm::Expected<json::Value> parsed = parseJSONInput(jsonText);
  if (!parsed)
    return configError("not valid JSON: " + llvm::toString(parsed.takeError()));
  const json::Object *top = parsed->getAsObject();
  if (!top)
    return configError("$: expected a JSON object at the top level");

  ConfigFields outer(*top, "$");
  std::string outerType = outer.string("model_type");
  if (outer.error)
    return configError(*outer.error);
  MoELayerConfig quantization;
  if (const json::Value *q = top->get("quantization_config");
      q && q->kind() != json::Value::Null) {
    if (llvm::Error e = readQuantization(*q, quantization))
      return std::move(e);
  }
  // Multimodal wrappers (qwen3_vl_moe, llama4, kimi_k25) keep the language
  // model's config, MoE fields included, in text_config.
  const json::Object *object = top;
  std::string path = "$", modelType = outerType;
  if (const json::Value *text = top->get("text_config");
      text && text->kind() != json::Value::Null) {
    object = text->getAsObject();
    if (!object)
      return configError("$.text_config: expected a JSON object");
    path = "$.text_config";
    ConfigFields inner(*object, path);
    modelType = inner.string("model_type", outerType + "_text");
    if (inner.error)
      return configError(*inner.error);
  }

  ConfigFields f(*object, path);
  MoELayerConfig c;
  c.modelType = modelType;
  const Family *family = llvm::find_if(
      kFamilies, [&](const Family &fam) { return fam.modelType == modelType; });
  if (family == std::end(kFamilies)) {
    for (const auto &[type, missing] : kNotYet)
      if (type == modelType)
        return configError(llvm::formatv("{0}.model_type: \"{1}\" is not "
                                         "supported yet: {2}",
                                         path, modelType, missing));
    return configError(llvm::formatv("{0}.model_type: unsupported MoE model "
                                     "type \"{1}\" (supported: {2})",
                                     path, modelType, supportedList()));
  }
  family->read(f, c);
  c.fp8WeightBlocks = quantization.fp8WeightBlocks;
  c.mxfp4Experts = quantization.mxfp4Experts;
  if (c.mxfp4Experts && modelType != "gpt_oss")
    return configError("$.quantization_config.quant_method: \"mxfp4\" is read "
                       "for gpt_oss checkpoints only, not " + modelType);
  std::string act = f.string("hidden_act", std::string("silu"));
  if (!f.error && act != "silu")
    f.failAt("hidden_act", "\"" + act + "\" is not supported yet: the experts "
                           "compute SwiGLU, silu(gate) * up");
  if (!f.error && c.topK > c.numExperts)
    f.failAt(object->get("moe_k") ? "moe_k" : "num_experts_per_tok",
             llvm::formatv("{0} is more than the {1} experts", c.topK,
                           c.numExperts));
  if (f.error)
    return configError(*f.error);
  return c;
}
