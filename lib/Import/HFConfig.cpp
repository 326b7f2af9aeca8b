//===- HFConfig.cpp - MoE layer description from a HuggingFace config -----===//
#include "moe/Import/HFConfig.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Support/JSONInput.h"
#include "moe/Support/Limits.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::moe;
namespace json = llvm::json;

namespace {
/// Reads typed fields of one JSON object, remembering the first error with
/// the field's path.
class FieldReader {
public:
  explicit FieldReader(const json::Object &object) : object(object) {}

  int64_t integer(llvm::StringRef key, std::optional<int64_t> fallback = {}) {
    const json::Value *v = find(key, "an integer", fallback.has_value());
    if (!v)
      return fallback.value_or(0);
    if (std::optional<int64_t> i = v->getAsInteger())
      return *i;
    fail(key, "an integer", v);
    return 0;
  }
  double number(llvm::StringRef key, double fallback) {
    const json::Value *v = find(key, "a number", true);
    if (!v)
      return fallback;
    if (std::optional<double> d = v->getAsNumber())
      return *d;
    fail(key, "a number", v);
    return fallback;
  }
  bool boolean(llvm::StringRef key, bool fallback) {
    const json::Value *v = find(key, "a boolean", true);
    if (!v)
      return fallback;
    if (std::optional<bool> b = v->getAsBoolean())
      return *b;
    fail(key, "a boolean", v);
    return fallback;
  }
  std::string string(llvm::StringRef key,
                     std::optional<std::string> fallback = {}) {
    const json::Value *v = find(key, "a string", fallback.has_value());
    if (!v)
      return fallback.value_or("");
    if (std::optional<llvm::StringRef> s = v->getAsString())
      return s->str();
    fail(key, "a string", v);
    return "";
  }
  /// A positive integer field of at most `max`.
  int64_t positive(llvm::StringRef key, int64_t max) {
    return bounded(key, integer(key), 1, max);
  }
  /// An optional integer field in [min, max].
  int64_t optional(llvm::StringRef key, int64_t fallback, int64_t min,
                   int64_t max) {
    return bounded(key, integer(key, fallback), min, max);
  }
  /// An optional number field that is finite and in [min, max].
  double number(llvm::StringRef key, double fallback, double min, double max) {
    double value = number(key, fallback);
    if (!error && !(value >= min && value <= max))
      error = llvm::formatv("$.{0}: must be a number in [{1}, {2}], got {3}",
                            key, llvm::format("%g", min),
                            llvm::format("%g", max), llvm::format("%g", value));
    return value;
  }
  bool has(llvm::StringRef key) const { return object.get(key) != nullptr; }
  void failWith(std::string message) {
    if (!error)
      error = std::move(message);
  }
  std::optional<std::string> error;

private:
  const json::Value *find(llvm::StringRef key, llvm::StringRef expected,
                          bool optional) {
    const json::Value *v = object.get(key);
    if ((!v || v->kind() == json::Value::Null) && !optional)
      failWith(llvm::formatv("$.{0}: missing required field ({1})", key,
                             expected));
    if (v && v->kind() == json::Value::Null)
      return nullptr;
    return v;
  }
  void fail(llvm::StringRef key, llvm::StringRef expected,
            const json::Value *got) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << *got;
    failWith(llvm::formatv("$.{0}: expected {1}, got {2}", key, expected, text));
  }
  int64_t bounded(llvm::StringRef key, int64_t value, int64_t min,
                  int64_t max) {
    if (error)
      return value;
    if (min == 1 && value <= 0)
      error = llvm::formatv("$.{0}: must be a positive integer, got {1}", key,
                            value);
    else if (value < min || value > max)
      error = llvm::formatv("$.{0}: must be in [{1}, {2}], got {3}", key, min,
                            max, value);
    return value;
  }
  const json::Object &object;
};

llvm::Error configError(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}
} // namespace

llvm::Expected<MoELayerConfig> moe::parseHFConfig(llvm::StringRef jsonText) {
  llvm::Expected<json::Value> parsed = parseJSONInput(jsonText);
  if (!parsed)
    return configError("not valid JSON: " + llvm::toString(parsed.takeError()));
  const json::Object *object = parsed->getAsObject();
  if (!object)
    return configError("$: expected a JSON object at the top level");

  FieldReader r(*object);
  MoELayerConfig c;
  c.modelType = r.string("model_type");
  if (r.error)
    return configError(*r.error);
  c.hiddenSize = r.positive("hidden_size", limits::kMaxHidden);
  c.topK = r.positive("num_experts_per_tok", limits::kMaxTopK);
  if (c.modelType == "qwen3_moe" || c.modelType == "qwen2_moe") {
    c.numExperts = r.positive("num_experts", limits::kMaxExperts);
    c.intermediateSize =
        r.positive("moe_intermediate_size", limits::kMaxIntermediate);
    c.normalize = r.boolean("norm_topk_prob", false);
    if (r.integer("shared_expert_intermediate_size", 0) != 0)
      r.failWith("$.shared_expert_intermediate_size: a gated shared expert "
                 "(qwen2_moe) is not supported yet");
  } else if (c.modelType == "mixtral") {
    c.numExperts = r.positive("num_local_experts", limits::kMaxExperts);
    c.intermediateSize =
        r.positive("intermediate_size", limits::kMaxIntermediate);
    c.normalize = true; // softmax over the selected logits == renormalize
  } else if (c.modelType == "deepseek_v3") {
    c.numExperts = r.positive("n_routed_experts", limits::kMaxExperts);
    c.intermediateSize =
        r.positive("moe_intermediate_size", limits::kMaxIntermediate);
    std::string scoring = r.string("scoring_func", std::string("sigmoid"));
    if (scoring == "softmax")
      c.score = ScoreFunction::softmax;
    else if (scoring == "sigmoid")
      c.score = ScoreFunction::sigmoid;
    else
      r.failWith("$.scoring_func: expected \"softmax\" or \"sigmoid\", got \"" +
                 scoring + "\"");
    c.normalize = r.boolean("norm_topk_prob", true);
    c.nGroup = r.optional("n_group", 1, 1, c.numExperts);
    c.topkGroup = r.optional("topk_group", 1, 1, c.nGroup);
    // The scale multiplies f32 routing weights: keep it a normal f32.
    c.scale = r.number("routed_scaling_factor", 1.0, 1e-30, 1e30);
    std::string method = r.string("topk_method", std::string("noaux_tc"));
    if (method != "noaux_tc" && method != "greedy" && method != "group_limited_greedy")
      r.failWith("$.topk_method: unknown value \"" + method + "\"");
    c.correctionBias = method == "noaux_tc";
    // The shared experts act as one expert of n times the width.
    int64_t shared = r.optional("n_shared_experts", 0, 0,
                                limits::kMaxIntermediate /
                                    std::max<int64_t>(c.intermediateSize, 1));
    c.sharedIntermediateSize = shared * c.intermediateSize;
  } else if (!r.error) {
    r.failWith("$.model_type: unsupported MoE model type \"" + c.modelType +
               "\" (supported: qwen3_moe, mixtral, deepseek_v3)");
  }
  if (!r.error && c.topK > c.numExperts)
    r.failWith(llvm::formatv("$.num_experts_per_tok: {0} is more than the {1} "
                             "experts", c.topK, c.numExperts));
  if (r.error)
    return configError(*r.error);
  return c;
}

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
  SmallVector<Type> inputs = {xType, RankedTensorType::get({e, h}, elem)};
  if (c.correctionBias)
    inputs.push_back(RankedTensorType::get({e}, b.getF32Type()));
  inputs.push_back(RankedTensorType::get({local, 2 * i, h}, elem));
  inputs.push_back(RankedTensorType::get({local, h, i}, elem));
  if (s) {
    inputs.push_back(RankedTensorType::get({2 * s, h}, elem));
    inputs.push_back(RankedTensorType::get({h, s}, elem));
  }
  if (ep > 1 && p) {
    inputs.push_back(RankedTensorType::get({p}, b.getI32Type()));
    inputs.push_back(RankedTensorType::get({p}, b.getF32Type()));
  } else if (ep > 1) {
    inputs.push_back(RankedTensorType::get({e}, b.getI32Type()));
  }
  auto func = func::FuncOp::create(b, loc, funcName,
                                   b.getFunctionType(inputs, {xType}));
  func->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  Block *body = func.addEntryBlock();
  b.setInsertionPointToEnd(body);

  auto args = body->getArguments();
  unsigned next = 2;
  Value bias = c.correctionBias ? args[next++] : Value();
  Value w13 = args[next++], w2 = args[next++];
  Value sharedW13 = s ? args[next++] : Value();
  Value sharedW2 = s ? args[next++] : Value();
  Value expertRank = ep > 1 && !p ? args[next++] : Value();
  Value physToLog = ep > 1 && p ? args[next++] : Value();
  Value replicaShare = ep > 1 && p ? args[next++] : Value();
  int64_t maxTokensPerRank = layout.maxTokensPerRank;
  auto routing = RoutingAttr::getChecked(
      [&] { return emitError(loc); }, &context, c.score, c.topK, c.nGroup,
      c.topkGroup, c.normalize, llvm::APFloat(c.scale), c.correctionBias);
  if (!routing)
    return nullptr;
  auto layer = LayerOp::create(
      b, loc, xType, args[0], args[1], bias, w13, w2, sharedW13, sharedW2,
      expertRank, physToLog, replicaShare, routing,
      ActivationAttr::get(&context, Activation::swiglu),
      LayoutAttr::getChecked([&] { return emitError(loc); }, &context, ep,
                             layout.tp),
      ep > 1 ? b.getI64IntegerAttr(maxTokensPerRank) : IntegerAttr(),
      PhaseAttr());
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
  add(placed ? "w13[P/ep,2I,H]" : "w13[E/ep,2I,H]", "w13", {local, 2 * i, h},
      elementType);
  add(placed ? "w2[P/ep,H,I]" : "w2[E/ep,H,I]", "w2", {local, h, i},
      elementType);
  if (s) {
    add("shared_w13[2Is,H]", "shared_w13", {2 * s, h}, elementType);
    add("shared_w2[H,Is]", "shared_w2", {h, s}, elementType);
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
    if (placed)
      parallel["physical_experts"] = layout.physicalExperts;
  }
  return json::Object{
      {"model_type", c.modelType},
      {"element_type", elementType},
      {"hidden_size", c.hiddenSize},
      {"intermediate_size", c.intermediateSize},
      {"experts", c.numExperts},
      {"top_k", c.topK},
      {"shared_intermediate_size", c.sharedIntermediateSize},
      {"routing",
       json::Object{{"score", stringifyScoreFunction(c.score)},
                    {"top_k", c.topK},
                    {"normalize", c.normalize},
                    {"n_group", c.nGroup},
                    {"topk_group", c.topkGroup},
                    {"routed_scaling_factor", c.scale},
                    {"correction_bias", c.correctionBias}}},
      {"layout", std::move(parallel)},
      {"entry_point",
       json::Object{{"symbol", ("_mlir_ciface_" + funcName).str()},
                    {"abi", "MLIR strided memref descriptors; result first"},
                    {"arguments", std::move(args)},
                    {"parameters", std::move(parameters)},
                    {"result", "y[T,H]"}}},
  };
}
