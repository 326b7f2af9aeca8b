//===- HFConfig.h - MoE layer description from a HuggingFace config -*- C++ -*-===//
#ifndef MOE_IMPORT_HFCONFIG_H
#define MOE_IMPORT_HFCONFIG_H

#include "moe/Dialect/MoE/IR/MoEAttrs.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::moe {

/// What the compiler needs from a model's config.json to build its MoE layer.
struct MoELayerConfig {
  std::string modelType;
  int64_t hiddenSize = 0;
  int64_t intermediateSize = 0; ///< Per routed expert.
  int64_t numExperts = 0;
  int64_t topK = 0;
  ScoreFunction score = ScoreFunction::softmax;
  bool normalize = false;
  int64_t nGroup = 1;
  int64_t topkGroup = 1;
  /// Groups ranked by their best score (DeepSeek-V2), not their top-2 sum.
  bool groupMax = false;
  /// Router logits rounded to bf16 before scoring (--router-dtype bf16).
  bool logitsBf16 = false;
  double scale = 1.0;
  bool correctionBias = false;
  int64_t sharedIntermediateSize = 0; ///< 0: no shared expert.
  /// The shared expert's output is scaled by sigmoid(shared_gate . x)
  /// (Qwen2-MoE); the layer then takes shared_gate[1, H].
  bool sharedGate = false;
  /// The routing weight scales the expert's input (Llama 4, top-1).
  bool scoreInput = false;
  /// gpt-oss: a bias on the router's logits (router_bias[E], f32) and on
  /// each expert GEMM's output (w13_bias[E, 2I], w2_bias[E, H]).
  bool routerBias = false;
  bool expertBias = false;
  /// The activation between the expert GEMMs; clamped_swiglu (gpt-oss)
  /// uses swigluAlpha and swigluLimit.
  Activation activation = Activation::swiglu;
  double swigluAlpha = 0.0;
  double swigluLimit = 0.0;
  /// The decoder layers whose MLP is this MoE block (ascending), by the
  /// family's rule (first_k_dense_replace, mlp_only_layers, ...).
  std::vector<int64_t> moeLayers;
  /// quantization_config of FP8 block-scaled weights: the (rows, columns)
  /// of a scale block. The checkpoint reader dequantizes them; the layer
  /// takes f32 or bf16 weights either way.
  std::optional<std::pair<int64_t, int64_t>> fp8WeightBlocks;
  /// With fp8WeightBlocks: the routed experts' weights stay FP8 E4M3 codes
  /// and the layer takes their block scales (w13_scale, w2_scale after w2)
  /// instead of dequantized weights.
  bool keepFp8Weights = false;
  /// quantization_config "mxfp4" (gpt-oss): the experts are stored as FP4
  /// E2M1 blocks of 32 with E8M0 scales, dequantized when read.
  bool mxfp4Experts = false;
};

/// Parses a config.json of a supported MoE family (qwen3_moe, qwen2_moe
/// without its shared-expert gate is rejected, mixtral, deepseek_v3). Errors
/// name the JSON path of the offending field, e.g. `$.num_experts`.
llvm::Expected<MoELayerConfig> parseHFConfig(llvm::StringRef jsonText);

/// How the layer is spread: `ep` expert-parallel ranks, each holding at most
/// `maxTokensPerRank` tokens (used only when ep > 1).
struct ParallelLayout {
  int64_t ep = 1;
  int64_t maxTokensPerRank = 0;
  int64_t tp = 1; ///< Consecutive EP ranks holding the same tokens.
  /// Physical expert slots of a load-balancer placement (0: none, each rank
  /// holds E/ep experts by expert_rank). With P slots the entry takes
  /// phys_to_log[P] and replica_share[P] instead of expert_rank, and each
  /// rank holds P/ep slots.
  int64_t physicalExperts = 0;
  /// With a placement: replicas chosen per batch from every rank's expert
  /// counts (moe.layer's per_batch_replicas) instead of by replica_share.
  bool perBatchReplicas = false;
};

/// Builds a module with one public function `funcName` computing the layer
/// on one rank: `(x[?,H], router[E,H], [bias[E]], [router_bias[E]],
/// w13[E/ep,2I,H], w2[E/ep,H,I], [w13_scale, w2_scale (FP8 weights)],
/// [w13_bias[E/ep,2I], w2_bias[E/ep,H]],
/// [shared_w13[2Is,H], shared_w2[H,Is], [shared_gate[1,H]]],
/// [expert_rank[E]])
/// -> y[?,H]`, with a C interface; with a placement, w13/w2 hold P/ep slots
/// and `phys_to_log[P], replica_share[P]` replace expert_rank.
OwningOpRef<ModuleOp> buildLayerModule(MLIRContext &context,
                                       const MoELayerConfig &config,
                                       const ParallelLayout &layout,
                                       Type elementType, Location loc,
                                       llvm::StringRef funcName);

/// The plan report: shapes, experts, routing, layout and the entry point.
llvm::json::Value layerPlan(const MoELayerConfig &config,
                            const ParallelLayout &layout,
                            llvm::StringRef elementType,
                            llvm::StringRef funcName);

} // namespace mlir::moe

#endif // MOE_IMPORT_HFCONFIG_H
