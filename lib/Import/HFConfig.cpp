//===- HFConfig.cpp - MoE layer description from a HuggingFace config -----===//
#include "moe/Import/HFConfig.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::moe;
namespace json = llvm::json;

OwningOpRef<ModuleOp> moe::buildLayerModule(MLIRContext &context,
                                            const MoELayerConfig &c,
                                            const ParallelLayout &layout,
                                            Type elem, Location loc,
                                            llvm::StringRef funcName) {
  context.loadDialect<MoEDialect, func::FuncDialect>();
  OpBuilder b(&context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(b, loc);
  b.setInsertionPointToEnd(module->getBody());

  int64_t dyn = ShapedType::kDynamic, h = c.hiddenSize, e = c.numExperts,
          i = c.intermediateSize, s = c.sharedIntermediateSize,
          ep = layout.ep, p = layout.physicalExperts,
          local = (p ? p : e) / std::max<int64_t>(ep, 1);
  auto xType = RankedTensorType::get({dyn, h}, elem);
  // The arguments in layerPlan's order and names.
  SmallVector<Type> inputs;
  SmallVector<StringRef> names;
  auto add = [&](StringRef name, Type type) {
    names.push_back(name);
    inputs.push_back(type);
  };
  add("x", xType);
  add("router_weight", RankedTensorType::get({e, h}, elem));
  if (c.correctionBias)
    add("correction_bias", RankedTensorType::get({e}, b.getF32Type()));
  if (c.routerBias)
    add("router_bias", RankedTensorType::get({e}, b.getF32Type()));
  const bool fp8 = c.keepFp8Weights && c.fp8WeightBlocks;
  Type weightElem = fp8 ? Type(b.getI8Type()) : elem;
  add("w13", RankedTensorType::get({local, 2 * i, h}, weightElem));
  add("w2", RankedTensorType::get({local, h, i}, weightElem));
  if (fp8) {
    auto [bm, bk] = *c.fp8WeightBlocks;
    auto blocks = [&](int64_t rows, int64_t cols) {
      return RankedTensorType::get(
          {local, llvm::divideCeilSigned(rows, bm), llvm::divideCeilSigned(cols, bk)},
          b.getF32Type());
    };
    add("w13_scale", blocks(2 * i, h));
    add("w2_scale", blocks(h, i));
  }
  if (c.expertBias) {
    add("w13_bias", RankedTensorType::get({local, 2 * i}, elem));
    add("w2_bias", RankedTensorType::get({local, h}, elem));
  }
  if (s) {
    add("shared_w13", RankedTensorType::get({2 * s, h}, elem));
    add("shared_w2", RankedTensorType::get({h, s}, elem));
    if (c.sharedGate)
      add("shared_gate", RankedTensorType::get({1, h}, elem));
  }
  if (ep > 1 && p) {
    add("phys_to_log", RankedTensorType::get({p}, b.getI32Type()));
    add("replica_share", RankedTensorType::get({p}, b.getF32Type()));
  } else if (ep > 1) {
    add("expert_rank", RankedTensorType::get({e}, b.getI32Type()));
  }
  auto func = func::FuncOp::create(b, loc, funcName,
                                   b.getFunctionType(inputs, {xType}));
  func->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  for (auto [position, name] : llvm::enumerate(names))
    func.setArgAttr(position, kArgumentName, b.getStringAttr(name));
  Block *body = func.addEntryBlock();
  b.setInsertionPointToEnd(body);

  auto args = body->getArguments();
  unsigned next = 2;
  Value bias = c.correctionBias ? args[next++] : Value();
  Value routerBias = c.routerBias ? args[next++] : Value();
  Value w13 = args[next++], w2 = args[next++];
  Value w13Scale = fp8 ? args[next++] : Value();
  Value w2Scale = fp8 ? args[next++] : Value();
  Value w13Bias = c.expertBias ? args[next++] : Value();
  Value w2Bias = c.expertBias ? args[next++] : Value();
  Value sharedW13 = s ? args[next++] : Value();
  Value sharedW2 = s ? args[next++] : Value();
  Value sharedGate = s && c.sharedGate ? args[next++] : Value();
  Value expertRank = ep > 1 && !p ? args[next++] : Value();
  Value physToLog = ep > 1 && p ? args[next++] : Value();
  Value replicaShare = ep > 1 && p ? args[next++] : Value();
  int64_t maxTokensPerRank = layout.maxTokensPerRank;
  auto routing = RoutingAttr::getChecked(
      [&] { return emitError(loc); }, &context, c.score, c.topK, c.nGroup,
      c.topkGroup, c.normalize, llvm::APFloat(c.scale), c.correctionBias,
      c.groupMax, c.logitsBf16);
  if (!routing)
    return nullptr;
  const bool clamped = c.activation == Activation::clamped_swiglu;
  auto layer = LayerOp::create(
      b, loc, xType, args[0], args[1], bias, routerBias, w13, w2, w13Scale, w2Scale,
      w13Bias, w2Bias, sharedW13, sharedW2, sharedGate, expertRank, physToLog, replicaShare,
      routing,
      ActivationAttr::get(&context, c.activation),
      LayoutAttr::getChecked([&] { return emitError(loc); }, &context, ep,
                             layout.tp),
      ep > 1 ? b.getI64IntegerAttr(maxTokensPerRank) : IntegerAttr(),
      PhaseAttr(), c.scoreInput ? b.getUnitAttr() : UnitAttr(),
      clamped ? b.getF32FloatAttr(c.swigluAlpha) : FloatAttr(),
      clamped ? b.getF32FloatAttr(c.swigluLimit) : FloatAttr(),
      physToLog && layout.perBatchReplicas ? b.getUnitAttr() : UnitAttr(),
      fp8 ? b.getDenseI64ArrayAttr({c.fp8WeightBlocks->first, c.fp8WeightBlocks->second})
          : DenseI64ArrayAttr());
  func::ReturnOp::create(b, loc, layer.getY());
  return module;
}

json::Value moe::layerPlan(const MoELayerConfig &c, const ParallelLayout &layout,
                           llvm::StringRef elementType,
                           llvm::StringRef funcName) {
  // Each argument twice: as text for people, and as name, shape (-1: the
  // token count) and dtype for callers that check what they pass.
  json::Array args, parameters;
  auto add = [&](llvm::StringRef text, llvm::StringRef name,
                 std::vector<int64_t> shape, llvm::StringRef dtype) {
    args.push_back(text);
    json::Array dims;
    for (int64_t d : shape)
      dims.push_back(d);
    parameters.push_back(json::Object{
        {"name", name}, {"shape", std::move(dims)}, {"dtype", dtype}});
  };
  const int64_t h = c.hiddenSize, e = c.numExperts, i = c.intermediateSize,
                s = c.sharedIntermediateSize;
  const bool placed = layout.ep > 1 && layout.physicalExperts;
  const int64_t local = (placed ? layout.physicalExperts : e) / layout.ep;
  add("x[T,H]", "x", {-1, h}, elementType);
  add("router_weight[E,H]", "router_weight", {e, h}, elementType);
  if (c.correctionBias)
    add("correction_bias[E] (f32)", "correction_bias", {e}, "f32");
  if (c.routerBias)
    add("router_bias[E] (f32)", "router_bias", {e}, "f32");
  const bool fp8 = c.keepFp8Weights && c.fp8WeightBlocks;
  add(placed ? "w13[P/ep,2I,H]" : "w13[E/ep,2I,H]", "w13", {local, 2 * i, h},
      fp8 ? "fp8_e4m3" : elementType);
  add(placed ? "w2[P/ep,H,I]" : "w2[E/ep,H,I]", "w2", {local, h, i},
      fp8 ? "fp8_e4m3" : elementType);
  if (fp8) {
    auto [bm, bk] = *c.fp8WeightBlocks;
    add(placed ? "w13_scale[P/ep,ceil(2I/bm),ceil(H/bk)] (f32)"
               : "w13_scale[E/ep,ceil(2I/bm),ceil(H/bk)] (f32)",
        "w13_scale",
        {local, llvm::divideCeilSigned(2 * i, bm), llvm::divideCeilSigned(h, bk)}, "f32");
    add(placed ? "w2_scale[P/ep,ceil(H/bm),ceil(I/bk)] (f32)"
               : "w2_scale[E/ep,ceil(H/bm),ceil(I/bk)] (f32)",
        "w2_scale",
        {local, llvm::divideCeilSigned(h, bm), llvm::divideCeilSigned(i, bk)}, "f32");
  }
  if (c.expertBias) {
    add(placed ? "w13_bias[P/ep,2I]" : "w13_bias[E/ep,2I]", "w13_bias", {local, 2 * i},
        elementType);
    add(placed ? "w2_bias[P/ep,H]" : "w2_bias[E/ep,H]", "w2_bias", {local, h},
        elementType);
  }
  if (s) {
    add("shared_w13[2Is,H]", "shared_w13", {2 * s, h}, elementType);
    add("shared_w2[H,Is]", "shared_w2", {h, s}, elementType);
    if (c.sharedGate)
      add("shared_gate[1,H]", "shared_gate", {1, h}, elementType);
  }
  if (placed) {
    add("phys_to_log[P] (i32)", "phys_to_log", {layout.physicalExperts}, "i32");
    add("replica_share[P] (f32)", "replica_share", {layout.physicalExperts},
        "f32");
  } else if (layout.ep > 1) {
    add("expert_rank[E] (i32)", "expert_rank", {e}, "i32");
  }
  json::Object parallel{{"ep", layout.ep}, {"tp", layout.tp}};
  if (layout.ep > 1) {
    parallel["max_tokens_per_rank"] = layout.maxTokensPerRank;
    parallel["received_rows_capacity"] = layout.maxTokensPerRank * layout.ep;
    parallel["local_experts"] =
        (placed ? layout.physicalExperts : c.numExperts) / layout.ep;
    if (placed) {
      parallel["physical_experts"] = layout.physicalExperts;
      parallel["replica_selection"] = layout.perBatchReplicas ? "per_batch" : "static";
    }
  }
  return json::Object{
      {"model_type", c.modelType},
      {"element_type", elementType},
      {"hidden_size", c.hiddenSize},
      {"intermediate_size", c.intermediateSize},
      {"experts", c.numExperts},
      {"top_k", c.topK},
      {"shared_intermediate_size", c.sharedIntermediateSize},
      {"shared_gate", c.sharedGate},
      {"score_input", c.scoreInput},
      {"router_bias", c.routerBias},
      {"expert_bias", c.expertBias},
      {"expert_weights",
       fp8 ? json::Value(json::Object{
                 {"format", "fp8_e4m3"},
                 {"block", json::Array{c.fp8WeightBlocks->first, c.fp8WeightBlocks->second}}})
           : json::Value(json::Object{{"format", elementType}})},
      {"activation", c.activation == Activation::clamped_swiglu
                         ? json::Value(json::Object{{"kind", "clamped_swiglu"},
                                                    {"alpha", c.swigluAlpha},
                                                    {"limit", c.swigluLimit}})
                         : json::Value(json::Object{{"kind", "swiglu"}})},
      {"routing",
       json::Object{{"score", stringifyScoreFunction(c.score)},
                    {"top_k", c.topK},
                    {"normalize", c.normalize},
                    {"n_group", c.nGroup},
                    {"topk_group", c.topkGroup},
                    {"routed_scaling_factor", c.scale},
                    {"correction_bias", c.correctionBias},
                    {"group_score", c.groupMax ? "max" : "top2_sum"},
                    {"logits_dtype", c.logitsBf16 ? "bf16" : "f32"}}},
      {"layout", std::move(parallel)},
      {"entry_point",
       json::Object{{"symbol", ("_mlir_ciface_" + funcName).str()},
                    {"abi", "MLIR strided memref descriptors; result first"},
                    {"arguments", std::move(args)},
                    {"parameters", std::move(parameters)},
                    {"result", "y[T,H]"}}},
  };
}
