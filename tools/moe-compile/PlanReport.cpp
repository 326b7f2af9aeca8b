//===- PlanReport.cpp - the JSON plan report of moe-compile ---------------===//
#include "PlanReport.h"

#include "moe/Dialect/MoE/Analysis/ChunkPlan.h"

using namespace mlir;
namespace json = llvm::json;

json::Value moe_compile::planReport(ModuleOp module,
                                    const moe::MoELayerConfig &config,
                                    const moe::ParallelLayout &layout,
                                    llvm::StringRef elementType,
                                    llvm::StringRef dispatchQuantization,
                                    bool dedupeTp, llvm::StringRef funcName) {
  json::Object plan =
      *moe::layerPlan(config, layout, elementType, funcName).getAsObject();

  int64_t tokens = layout.maxTokensPerRank;
  json::Object chunking{{"chunked", false}, {"chunk_size", tokens}, {"chunks", 1}};
  module.walk([&](Operation *op) {
    auto record = op->getAttrOfType<DictionaryAttr>("moe.chunk_plan");
    if (!record)
      return;
    auto get = [&](StringRef key) {
      return cast<IntegerAttr>(record.get(key)).getInt();
    };
    tokens = get("chunk_size");
    chunking = json::Object{{"chunked", get("max_chunks") > 1},
                            {"chunk_size", tokens},
                            {"chunks", get("max_chunks")},
                            {"budget_bytes", get("budget_bytes")},
                            {"bytes_per_token", get("bytes_per_token")},
                            {"trip_count", layout.ep > 1
                                               ? "max over the EP group"
                                               : "ceil(tokens / chunk_size)"}};
  });
  plan["chunking"] = std::move(chunking);
  bool sliced = layout.tp > 1 && dedupeTp;
  plan["tensor_parallel"] = json::Object{
      {"tp", layout.tp},
      {"dedupe", sliced ? "slice" : "none"},
      {"tokens_dispatched_per_rank",
       sliced ? "ceil(T / tp): each TP rank dispatches its share, then "
                "tp.gather rebuilds all T rows"
              : "T"}};

  moe::LayerShape shape;
  shape.hidden = config.hiddenSize;
  shape.intermediate = config.intermediateSize;
  shape.experts = config.numExperts;
  shape.topK = config.topK;
  shape.ep = layout.ep;
  shape.elementBytes = elementType == "bf16" ? 2 : 4;
  shape.sharedIntermediate = config.sharedIntermediateSize;
  json::Array buffers;
  int64_t total = 0;
  for (const moe::BufferFootprint &b : moe::moeBuffers(shape)) {
    buffers.push_back(json::Object{{"name", b.name},
                                   {"bytes_per_token", b.bytesPerToken},
                                   {"formula", b.formula},
                                   {"bytes", b.bytesPerToken * tokens}});
    total += b.bytesPerToken * tokens;
  }
  plan["buffers"] = json::Object{{"tokens_per_chunk", tokens},
                                 {"list", std::move(buffers)},
                                 {"total_bytes", total}};
  // A dispatched row: activations (FP8 plus scales when quantized), then
  // top-k local ids and weights.
  bool quantized = layout.ep > 1 && dispatchQuantization != "none";
  int64_t h = config.hiddenSize;
  int64_t activationBytes =
      !quantized ? h * shape.elementBytes
      : dispatchQuantization == "fp8-e4m3-g128" ? h + h / 128 * 4
                                                 : h + h / 32;
  int64_t rowBytes = activationBytes + config.topK * 8;
  plan["wire_bytes_per_token"] = json::Object{
      {"dispatch_row", rowBytes},
      {"dispatch_rows_per_token", "distinct destination ranks, at most " +
                                      std::to_string(std::min<int64_t>(
                                          config.topK, layout.ep))},
      {"combine_row", config.hiddenSize * shape.elementBytes},
      {"quantization", quantized ? dispatchQuantization : "none"}};
  return plan;
}
