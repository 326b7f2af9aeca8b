//===- PlanReport.cpp - the JSON plan report of moe-compile ---------------===//
#include "PlanReport.h"

#include "moe/Dialect/MoE/Analysis/ChunkPlan.h"
#include "moe/Dialect/MoE/Analysis/DispatchPlan.h"
#include "moe/Dialect/MoE/Analysis/PhasePlan.h"
#include "moe/Dialect/MoE/Analysis/WorkspacePlan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/CheckedArithmetic.h"

using namespace mlir;
namespace json = llvm::json;

namespace {
/// One phase's dispatch: its layout, static workspaces and bytes on the wire.
/// `allGather`: rows that carry i32 ids: the decode layout's exchange by
/// all-gather (moe-compile --ep-all-gather), or the prefill rows packed by
/// the layer (--ep-pack-in-layer).
json::Object phaseReport(const moe::LayerShape &shape, moe::DispatchBounds bounds,
                         llvm::StringRef layoutText, bool allGather = false) {
  json::Array workspaces;
  for (const moe::Workspace &w : moe::planWorkspaces(bounds))
    workspaces.push_back(
        json::Object{{"name", w.name}, {"formula", w.formula}, {"bytes", w.bytes}});
  const int64_t row = allGather ? moe::gatherRowBytes(bounds) : moe::dispatchRowBytes(bounds);
  moe::WireBytes dispatch =
      bounds.slots ? moe::decodeDispatchBytes(shape, row, bounds.slots, bounds.maxTokens)
                   : moe::prefillDispatchBytes(shape, row, bounds.maxTokens);
  moe::DispatchBounds combineRows = bounds;
  combineRows.wireActivationBytes = bounds.hidden * bounds.elementBytes;
  combineRows.topK = 0; // combine rows carry activations only
  const int64_t combineRow = moe::dispatchRowBytes(combineRows);
  moe::WireBytes combine =
      bounds.slots ? moe::decodeDispatchBytes(shape, combineRow, bounds.slots, bounds.maxTokens)
                   : moe::prefillDispatchBytes(shape, combineRow, bounds.maxTokens);
  return json::Object{
      {"layout", layoutText},
      {"max_tokens_per_rank", bounds.maxTokens},
      {"dispatch_row_bytes", row},
      {"dispatch_bytes_per_call_max", dispatch.perStepMax},
      {"dispatch_bytes_per_token", dispatch.perTokenMax},
      {"combine_bytes_per_call_max", combine.perStepMax},
      {"combine_bytes_per_token", combine.perTokenMax},
      {"per_token_note", bounds.slots ? "fixed bytes per call over the most tokens: "
                                        "fewer tokens pay more each"
                                      : "at most: a token reaches min(top_k, ep) ranks"},
      {"workspaces", std::move(workspaces)}};
}
} // namespace

llvm::Expected<json::Value>
moe_compile::planReport(ModuleOp module, const moe::MoELayerConfig &config,
                        const moe::ParallelLayout &layout, llvm::StringRef elementType,
                        llvm::StringRef dispatchQuantization, bool expertsReadCodes, bool dedupeTp,
                        llvm::StringRef funcName, int64_t decodeMaxTokens, bool allGather,
                        bool packInLayer) {
  json::Object plan =
      *moe::layerPlan(config, layout, elementType, funcName).getAsObject();

  // The chunking of the (prefill) variant that large batches run.
  std::string prefillName =
      decodeMaxTokens > 0 ? (funcName + "_prefill").str() : funcName.str();
  auto prefillFunc = module.lookupSymbol<func::FuncOp>(prefillName);
  int64_t tokens = layout.maxTokensPerRank;
  json::Object chunking{{"chunked", false}, {"chunk_size", tokens}, {"chunks", 1}};
  if (prefillFunc)
    prefillFunc.walk([&](Operation *op) {
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
  auto planError = [](const std::string &problem) {
    return llvm::createStringError("plan: " + problem);
  };
  if (auto problem = moe::checkLayerShape(shape))
    return planError(*problem);
  json::Array buffers;
  int64_t total = 0;
  for (const moe::BufferFootprint &b : moe::moeBuffers(shape)) {
    std::optional<int64_t> bytes = llvm::checkedMul(b.bytesPerToken, tokens);
    std::optional<int64_t> sum = bytes ? llvm::checkedAdd(total, *bytes) : std::nullopt;
    if (!sum)
      return llvm::createStringError(
          "plan: the buffer " + b.name + " of " + std::to_string(tokens) +
          " tokens needs more bytes than a 64-bit size holds");
    buffers.push_back(json::Object{{"name", b.name},
                                   {"bytes_per_token", b.bytesPerToken},
                                   {"formula", b.formula},
                                   {"bytes", *bytes}});
    total = *sum;
  }
  plan["buffers"] = json::Object{{"tokens_per_chunk", tokens},
                                 {"list", std::move(buffers)},
                                 {"total_bytes", total}};
  // A dispatched row: activations (FP8 plus scales when quantized), then
  // top-k local ids and weights.
  bool quantized = layout.ep > 1 && dispatchQuantization != "none";
  int64_t h = config.hiddenSize;
  int64_t activationBytes = moe::wireActivationBytes(
      quantized ? *moe::parseWireFormat(dispatchQuantization.str()) : moe::WireFormat::Native,
      h, shape.elementBytes);
  int64_t rowBytes = activationBytes + config.topK * 6; // int16 id + f32 weight

  // Each phase's dispatch, as moe-plan-buffers sizes it. With TP dedupe a
  // rank dispatches ceil(T / tp) of its tokens.
  auto perRank = [&](int64_t t) { return sliced ? (t + layout.tp - 1) / layout.tp : t; };
  moe::DispatchBounds bounds;
  bounds.ep = layout.ep;
  bounds.topK = config.topK;
  bounds.hidden = h;
  bounds.elementBytes = shape.elementBytes;
  bounds.wireActivationBytes = activationBytes;
  // moe-fuse-quant-dispatch hands the codes and scales to the expert GEMM.
  if (quantized)
    bounds.codeGroups = h / moe::scaleGroup(*moe::parseWireFormat(dispatchQuantization.str()));
  bounds.maxTokens = perRank(tokens);
  bounds.capacity = bounds.maxTokens * layout.ep;
  if (auto problem = moe::checkDispatchBounds(bounds))
    return planError(*problem);
  const bool packed = packInLayer && layout.ep > 1;
  json::Object prefill = phaseReport(shape, bounds,
                                     "counts first, then packed rows; experts see "
                                     "expert-contiguous rows",
                                     packed);
  if (packed)
    prefill["exchange"] = "packed by the layer: its ops group each token's row and route (k "
                          "targets as i32, k weights) by destination rank, the runtime reads "
                          "only the ranks' offsets and moves the blocks; the rows return in "
                          "send order and the layer sums each token's";
  json::Object phases{{"prefill", std::move(prefill)}};
  if (decodeMaxTokens > 0) {
    moe::DispatchBounds decodeBounds = bounds;
    decodeBounds.maxTokens =
        perRank(moe::planPhases(decodeMaxTokens, layout.maxTokensPerRank).decodeMaxTokens);
    decodeBounds.slots = layout.ep > 1 ? decodeBounds.maxTokens : 0;
    decodeBounds.capacity = decodeBounds.maxTokens * layout.ep;
    if (auto problem = moe::checkDispatchBounds(decodeBounds))
      return planError(*problem);
    const bool gathered = allGather && layout.ep > 1;
    json::Object d = phaseReport(shape, decodeBounds,
                                 "fixed slots per rank, masked capacity per expert, "
                                 "no counts exchanged",
                                 gathered);
    if (gathered)
      d["exchange"] = "all-gather: every rank receives every rank's block of slots token rows "
                      "(global ids, mapped to its experts by the layer); the combine returns "
                      "block r to rank r, which sums its tokens' rows in rank order";
    d["capacity_per_expert"] = layout.ep > 1 ? decodeBounds.capacity : decodeBounds.maxTokens;
    phases["decode"] = std::move(d);
    phases["selection"] =
        "entry argument phase: 1 prefill, 2 decode, 0 decode when the most tokens "
        "any rank holds (agreed over the EP group) is at most " +
        std::to_string(decodeBounds.maxTokens);
    phases["decode_max_tokens"] = decodeBounds.maxTokens;
    if (json::Object *entry = plan.getObject("entry_point")) {
      (*entry)["phase_argument"] = "i32, last: 0 by token count, 1 prefill, 2 decode";
      if (json::Array *args = entry->getArray("arguments"))
        args->push_back("phase: i32");
      if (json::Array *parameters = entry->getArray("parameters"))
        parameters->push_back(json::Object{
            {"name", "phase"}, {"shape", json::Array{}}, {"dtype", "i32"}});
    }
  }
  plan["phases"] = std::move(phases);
  plan["wire_bytes_per_token"] = json::Object{
      {"dispatch_row", rowBytes},
      {"dispatch_rows_per_token", "distinct destination ranks, at most " +
                                      std::to_string(std::min<int64_t>(
                                          config.topK, layout.ep))},
      {"combine_row", config.hiddenSize * shape.elementBytes},
      {"quantization", quantized ? dispatchQuantization : "none"},
      {"experts_receive", !quantized ? "activations in the element type"
                          : expertsReadCodes
                              ? "FP8 E4M3 codes and f32 scales, read by the gate/up grouped GEMM"
                              : "activations in the element type, dequantized from the FP8 "
                                "rows on receipt"}};
  return plan;
}
