//===- MoEOps.cpp - moe operation verifiers -------------------------------===//
//
// Every rule here is numbered in docs/MoEVerifierRules.md and has a case of
// the same name in test/Dialect/MoE/invalid.mlir.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/Analysis/PhasePlan.h"
#include "moe/Support/Limits.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::moe;

namespace {
/// Two extents agree unless both are static and differ.
bool agree(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// Checks a tensor's rank, reporting `rule` with the operand's name.
LogicalResult expectRank(Operation *op, StringRef rule, StringRef name,
                         Value v, int64_t rank) {
  if (tensorType(v).getRank() == rank)
    return success();
  return op->emitOpError() << rule << ": " << name << " must have rank "
                           << rank << ", got " << v.getType();
}

LogicalResult expectSameElementType(Operation *op, StringRef rule,
                                    StringRef name, Value v, Type expected) {
  if (tensorType(v).getElementType() == expected)
    return success();
  return op->emitOpError() << rule << ": " << name << " must have element type "
                           << expected << ", got " << v.getType();
}

/// FP8 weights (`fp8_c1`): i8 codes come with f32 block scales and a block
/// shape, and only they; `scales` is `[E, ceil(M / bm), ceil(K / bk)]` for
/// the static `[E, M, K]` of `weight`.
LogicalResult verifyWeightScales(Operation *op, StringRef name, Value weight,
                                 Value scales, std::optional<ArrayRef<int64_t>> block) {
  const bool codes = tensorType(weight).getElementType().isInteger(8);
  if (codes != static_cast<bool>(scales) || codes != block.has_value())
    return op->emitOpError() << "fp8_c1: " << name
                             << ": FP8 weight codes (i8) come with weight scales "
                                "and a weight_block, and those only with them";
  if (!codes)
    return success();
  if (block->size() != 2 || (*block)[0] < 1 || (*block)[1] < 1 ||
      (*block)[0] > limits::kMaxHidden || (*block)[1] > limits::kMaxHidden)
    return op->emitOpError() << "fp8_c1: weight_block must be [rows, columns] "
                                "of a scale block, each in [1, "
                             << limits::kMaxHidden << "]";
  ArrayRef<int64_t> w = tensorType(weight).getShape();
  auto type = tensorType(scales);
  if (w.size() != 3 || llvm::any_of(w, ShapedType::isDynamic) ||
      type.getShape() != ArrayRef<int64_t>{w[0], llvm::divideCeilSigned(w[1], (*block)[0]),
                                           llvm::divideCeilSigned(w[2], (*block)[1])})
    return op->emitOpError() << "fp8_c1: the scales of " << name << " "
                             << weight.getType() << " in blocks of " << (*block)[0]
                             << " x " << (*block)[1]
                             << " must be [E, ceil(M / rows), ceil(K / columns)], got "
                             << scales.getType();
  return success();
}

std::string dimStr(int64_t d) {
  return ShapedType::isDynamic(d) ? std::string("?") : std::to_string(d);
}

/// Rows a rank may receive: every token of every rank of the group.
constexpr int64_t kMaxRows = limits::kMaxTokens * limits::kMaxRanks; // 2^47
/// Dispatched rows and (token, choice) pairs are numbered in i32 (slot,
/// row_expert), so a static count of them is at most this.
constexpr int64_t kMaxI32 = (int64_t(1) << 31) - 1;
/// Rows of one GEMM tile of the padded dispatch layout.
constexpr int64_t kMaxRowTile = 1024;
/// The most rows any step holds: top-k choices of kMaxRows rows.
constexpr int64_t kMaxExtent = kMaxRows * limits::kMaxTopK; // 2^57
/// The most elements of one tensor: the largest a valid layer makes is
/// T * k rows of 2I (2^31 * 2^10 * 2^21).
constexpr int64_t kMaxElements = int64_t(1) << 62;

/// size_c1, checked first by every moe op: each static extent of a tensor
/// operand or result is at most kMaxExtent and a tensor's static extents
/// multiply to at most kMaxElements, so that no product of them overflows.
LogicalResult verifyExtents(Operation *op) {
  auto check = [&](Type type) -> LogicalResult {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor)
      return success();
    int64_t elements = 1;
    for (int64_t d : tensor.getShape()) {
      if (ShapedType::isDynamic(d))
        continue;
      std::optional<int64_t> product = llvm::checkedMul(elements, d);
      if (d > kMaxExtent || !product || *product > kMaxElements)
        return op->emitOpError()
               << "size_c1: " << type << " has an extent above 2^57 or more "
               << "than 2^62 elements";
      elements = *product;
    }
    return success();
  };
  for (Type type : op->getOperandTypes())
    if (failed(check(type)))
      return failure();
  for (Type type : op->getResultTypes())
    if (failed(check(type)))
      return failure();
  return success();
}

/// A static size attribute or extent `v` lies in [lo, hi] (dynamic passes).
bool within(int64_t v, int64_t lo, int64_t hi) {
  return ShapedType::isDynamic(v) || (v >= lo && v <= hi);
}

/// The routing rules that depend on the number of experts.
LogicalResult verifyRoutingForExperts(Operation *op, RoutingAttr routing,
                                      int64_t experts, Value bias) {
  if (ShapedType::isDynamic(experts))
    return op->emitOpError()
           << "route_c2: the number of experts must be static";
  if (experts > limits::kMaxExperts)
    return op->emitOpError() << "route_c9: " << experts
                             << " experts exceed the limit of "
                             << limits::kMaxExperts;
  if (routing.getTopK() > experts)
    return op->emitOpError() << "route_c3: top_k (" << routing.getTopK()
                             << ") exceeds the number of experts (" << experts
                             << ")";
  int64_t groups = routing.getNGroup();
  if (experts % groups != 0)
    return op->emitOpError() << "route_c4: n_group (" << groups
                             << ") does not divide the number of experts ("
                             << experts << ")";
  int64_t perGroup = experts / groups;
  // Both factors are bounded (routing_c6, route_c9): the product fits.
  if (routing.getTopK() > routing.getTopkGroup() * perGroup)
    return op->emitOpError()
           << "route_c5: top_k (" << routing.getTopK()
           << ") exceeds the experts in the selected groups (topk_group "
           << routing.getTopkGroup() << " x " << perGroup << ")";
  if (groups > 1 && perGroup < 2 && !routing.getGroupMax())
    return op->emitOpError()
           << "route_c6: group-limited routing ranks groups by their two best "
              "experts, so each group needs at least 2 experts, got "
           << perGroup;
  if (routing.getCorrectionBias() != static_cast<bool>(bias))
    return op->emitOpError()
           << "route_c7: a correction bias operand is given if and only if "
              "the routing has correction_bias";
  if (bias) {
    auto biasType = tensorType(bias);
    if (biasType.getRank() != 1 || !agree(biasType.getDimSize(0), experts))
      return op->emitOpError() << "route_c7: correction bias must be tensor<"
                               << experts << "xf32>, got " << bias.getType();
  }
  return success();
}

/// A one-dimensional f32 [E] bias added to the router's logits.
LogicalResult verifyLogitBias(Operation *op, StringRef rule, Value bias,
                              int64_t experts) {
  if (!bias)
    return success();
  auto type = tensorType(bias);
  if (type.getRank() != 1 || !agree(type.getDimSize(0), experts))
    return op->emitOpError() << rule << ": the router's logit bias must be tensor<"
                             << experts << "xf32>, got " << type;
  return success();
}

/// clamped_swiglu takes swiglu_alpha and swiglu_limit (finite, limit > 0);
/// swiglu takes neither.
LogicalResult verifyActivationParameters(Operation *op, StringRef rule,
                                         Activation kind, std::optional<APFloat> alpha,
                                         std::optional<APFloat> limit) {
  if (kind != Activation::clamped_swiglu) {
    if (alpha || limit)
      return op->emitOpError() << rule << ": swiglu_alpha and swiglu_limit belong to "
                                          "clamped_swiglu only";
    return success();
  }
  if (!alpha || !limit)
    return op->emitOpError() << rule << ": clamped_swiglu needs swiglu_alpha and "
                                        "swiglu_limit";
  if (!alpha->isFinite() || !limit->isFinite() || limit->isNegative() ||
      limit->isZero())
    return op->emitOpError() << rule << ": swiglu_alpha must be finite and "
                                        "swiglu_limit finite and > 0, got "
                             << alpha->convertToFloat() << " and "
                             << limit->convertToFloat();
  return success();
}

/// Router weight [E, H] against x [T, H]; returns E.
FailureOr<int64_t> verifyRouterWeight(Operation *op, Value x, Value weight) {
  if (failed(expectRank(op, "route_c1", "x", x, 2)) ||
      failed(expectRank(op, "route_c2", "router weight", weight, 2)) ||
      failed(expectSameElementType(op, "route_c2", "router weight", weight,
                                   tensorType(x).getElementType())))
    return failure();
  ArrayRef<int64_t> xs = tensorType(x).getShape();
  if (!within(xs[0], 0, limits::kMaxTokens) ||
      !within(xs[1], 1, limits::kMaxHidden) ||
      !within(tensorType(weight).getDimSize(1), 1, limits::kMaxHidden))
    return op->emitOpError() << "route_c9: x " << x.getType() << " must hold at most "
                             << limits::kMaxTokens << " tokens of a hidden size in [1, "
                             << limits::kMaxHidden << "]";
  if (!agree(tensorType(weight).getDimSize(1), tensorType(x).getDimSize(1)))
    return op->emitOpError() << "route_c2: router weight " << weight.getType()
                             << " does not match hidden size of x "
                             << x.getType();
  return tensorType(weight).getDimSize(0);
}
} // namespace

//===----------------------------------------------------------------------===//
// LayerOp
//===----------------------------------------------------------------------===//

LogicalResult LayerOp::verify() {
  Operation *op = getOperation();
  Type elem = getX().getType().getElementType();
  if (failed(verifyExtents(op)) ||
      failed(expectRank(op, "layer_c1", "x", getX(), 2)))
    return failure();
  if (getY().getType() != getX().getType())
    return emitOpError() << "layer_c1: result type " << getY().getType()
                         << " must equal the type of x " << getX().getType();
  if (getPerBatchReplicas() && !getPhysToLog())
    return emitOpError() << "layer_c17: per_batch_replicas chooses among a "
                            "placement's replicas: it needs placement(...)";
  FailureOr<int64_t> experts = verifyRouterWeight(op, getX(), getRouterWeight());
  if (failed(experts) ||
      failed(verifyRoutingForExperts(op, getRouting(), *experts,
                                     getCorrectionBias())) ||
      failed(verifyLogitBias(op, "layer_c14", getRouterBias(), *experts)) ||
      failed(verifyActivationParameters(op, "layer_c16", getActivation(),
                                        getSwigluAlpha(), getSwigluLimit())))
    return failure();

  int64_t ep = getLayout().getEp();
  // With a placement the ranks hold P/ep slots each (layer_c8), whatever E.
  if (!getPhysToLog() && *experts % ep != 0)
    return emitOpError() << "layer_c5: ep (" << ep
                         << ") does not divide the number of experts ("
                         << *experts << ")";
  int64_t localExperts = *experts / ep;
  const char *localName = "E/ep";
  if (getPhysToLog()) {
    auto slots = tensorType(getPhysToLog());
    auto shares = tensorType(getReplicaShare());
    int64_t p = slots.getRank() == 1 ? slots.getDimSize(0) : ShapedType::kDynamic;
    if (ShapedType::isDynamic(p) || p % ep != 0 || p < *experts ||
        shares.getShape() != slots.getShape())
      return emitOpError() << "layer_c8: a placement is phys_to_log[P] and "
                              "replica_share[P] with a static P >= E that ep "
                              "divides, got "
                           << slots << " and " << shares;
    localExperts = p / ep;
    localName = "P/ep";
  }
  int64_t hidden = getX().getType().getDimSize(1);
  if (failed(expectRank(op, "layer_c2", "w13", getW13(), 3)) ||
      failed(expectRank(op, "layer_c2", "w2", getW2(), 3)))
    return failure();
  ArrayRef<int64_t> w13 = getW13().getType().getShape();
  ArrayRef<int64_t> w2 = getW2().getType().getShape();
  // The intermediate size must be static: the activation splits w13's rows.
  if (!agree(w13[0], localExperts) || !agree(w2[0], localExperts) ||
      !agree(w13[2], hidden) || !agree(w2[1], hidden) ||
      ShapedType::isDynamic(w13[1]) || ShapedType::isDynamic(w2[2]) ||
      w13[1] != 2 * w2[2])
    return emitOpError() << "layer_c2: expert weights must be w13[" << localName << "="
                         << localExperts << ", 2I, H=" << dimStr(hidden) << "] and w2[" << localName
                         << ", H, I], got " << getW13().getType() << " and " << getW2().getType()
                         << (ShapedType::isDynamic(w13[1]) || ShapedType::isDynamic(w2[2])
                                 ? " (I must be static: the activation splits w13's rows)"
                                 : "");

  if (static_cast<bool>(getW13Bias()) != static_cast<bool>(getW2Bias()))
    return emitOpError() << "layer_c15: expert biases are w13_bias and w2_bias "
                            "together";
  if (getW13Bias()) {
    auto b13 = tensorType(getW13Bias()), b2 = tensorType(getW2Bias());
    if (b13.getRank() != 2 || b2.getRank() != 2 || !agree(b13.getDimSize(0), localExperts) ||
        !agree(b2.getDimSize(0), localExperts) || b13.getDimSize(1) != w13[1] ||
        !agree(b2.getDimSize(1), hidden))
      return emitOpError() << "layer_c15: expert biases must be w13_bias["
                           << localName << "=" << localExperts << ", 2I="
                           << dimStr(w13[1]) << "] and w2_bias[" << localName
                           << ", H=" << dimStr(hidden) << "], got " << b13
                           << " and " << b2;
  }

  const bool placed = static_cast<bool>(getPhysToLog());
  if (ep > 1 ? static_cast<bool>(getExpertRank()) == placed || !getMaxTokensPerRank()
             : getExpertRank() || placed)
    return emitOpError() << "layer_c6: ep > 1 takes expert_rank or a placement "
                            "(one of them) and max_tokens_per_rank; ep = 1 takes "
                            "neither map";
  if (getPhase() == Phase::decode && !getMaxTokensPerRank())
    return emitOpError() << "layer_c7: the decode phase needs "
                            "max_tokens_per_rank (it sizes the fixed layout)";
  if (getExpertRank()) {
    auto type = tensorType(getExpertRank());
    if (type.getRank() != 1 || !agree(type.getDimSize(0), *experts))
      return emitOpError() << "layer_c6: expert_rank must be tensor<"
                           << *experts << "xi32>, got " << type;
  }

  if (static_cast<bool>(getSharedW13()) != static_cast<bool>(getSharedW2()))
    return emitOpError() << "layer_c3: shared expert needs both shared_w13 "
                            "and shared_w2";
  if (getSharedW13()) {
    if (failed(expectRank(op, "layer_c3", "shared_w13", getSharedW13(), 2)) ||
        failed(expectRank(op, "layer_c3", "shared_w2", getSharedW2(), 2)))
      return failure();
    ArrayRef<int64_t> s13 = tensorType(getSharedW13()).getShape();
    ArrayRef<int64_t> s2 = tensorType(getSharedW2()).getShape();
    if (!agree(s13[1], hidden) || !agree(s2[0], hidden) ||
        ShapedType::isDynamic(s13[0]) || ShapedType::isDynamic(s2[1]) ||
        s13[0] != 2 * s2[1])
      return emitOpError() << "layer_c3: shared expert weights must be "
                              "shared_w13[2Is, H] and shared_w2[H, Is], got "
                           << getSharedW13().getType() << " and "
                           << getSharedW2().getType();
  }

  if (getSharedGate()) {
    if (!getSharedW13())
      return emitOpError() << "layer_c12: shared_gate scales the shared "
                              "expert: it needs shared_w13 and shared_w2";
    auto gate = tensorType(getSharedGate());
    if (gate.getRank() != 2 || gate.getDimSize(0) != 1 ||
        !agree(gate.getDimSize(1), hidden))
      return emitOpError() << "layer_c12: shared_gate must be "
                           << RankedTensorType::get({1, hidden}, elem)
                           << ", got " << gate;
  }

  if (getScoreInput() && getRouting().getTopK() != 1)
    return emitOpError() << "layer_c13: score_input (the routing weight "
                            "scales the expert's input) needs top_k = 1, got "
                         << getRouting().getTopK();

  std::optional<ArrayRef<int64_t>> block = getWeightBlock();
  if (failed(verifyWeightScales(op, "w13", getW13(), getW13Scale(), block)) ||
      failed(verifyWeightScales(op, "w2", getW2(), getW2Scale(), block)))
    return failure();
  const bool fp8Weights = static_cast<bool>(getW13Scale());
  for (auto [name, value] :
       {std::pair<StringRef, Value>{"w13", fp8Weights ? Value() : getW13()},
        {"w2", fp8Weights ? Value() : getW2()},
        {"shared_w13", getSharedW13()}, {"shared_w2", getSharedW2()},
        {"shared_gate", getSharedGate()}, {"w13_bias", getW13Bias()},
        {"w2_bias", getW2Bias()}})
    if (value && failed(expectSameElementType(op, "layer_c4", name, value, elem)))
      return failure();

  // layer_c9: the sizes the planners multiply, within moe/Support/Limits.h.
  int64_t intermediate = w2[2];
  int64_t sharedIntermediate =
      getSharedW2() ? tensorType(getSharedW2()).getDimSize(1) : 1;
  int64_t slotCount = getPhysToLog() ? localExperts * ep : *experts;
  std::optional<int64_t> maxTokens = getMaxTokensPerRank();
  if (ShapedType::isDynamic(hidden) || !within(intermediate, 1, limits::kMaxIntermediate) ||
      !within(sharedIntermediate, 1, limits::kMaxIntermediate) || slotCount > limits::kMaxExperts ||
      (maxTokens && *maxTokens > limits::kMaxTokens)) {
    std::string got = ShapedType::isDynamic(hidden) ? "a dynamic hidden size"
                      : !within(intermediate, 1, limits::kMaxIntermediate)
                          ? "intermediate size " + std::to_string(intermediate)
                      : !within(sharedIntermediate, 1, limits::kMaxIntermediate)
                          ? "shared intermediate size " + std::to_string(sharedIntermediate)
                      : slotCount > limits::kMaxExperts
                          ? std::to_string(slotCount) + " expert slots"
                          : "max_tokens_per_rank = " + std::to_string(*maxTokens);
    return emitOpError() << "layer_c9: a layer needs a static hidden size, "
                            "intermediate sizes in [1, "
                         << limits::kMaxIntermediate << "], at most " << limits::kMaxExperts
                         << " expert slots and max_tokens_per_rank at most " << limits::kMaxTokens
                         << "; got " << got;
  }
  int64_t tokens = getX().getType().getDimSize(0);
  if (maxTokens && !ShapedType::isDynamic(tokens) && tokens > *maxTokens)
    return emitOpError() << "layer_c10: " << tokens
                         << " static tokens exceed max_tokens_per_rank ("
                         << *maxTokens << ")";
  if (!ShapedType::isDynamic(tokens) && tokens * getRouting().getTopK() > kMaxI32)
    return emitOpError() << "layer_c11: " << tokens << " tokens x top_k "
                         << getRouting().getTopK()
                         << " dispatched rows exceed the i32 row ids (2^31 - 1)";
  if (maxTokens) {
    LayerShape shape;
    shape.hidden = hidden;
    shape.intermediate = intermediate;
    shape.experts = slotCount;
    shape.topK = getRouting().getTopK();
    shape.ep = ep;
    shape.elementBytes = elem.getIntOrFloatBitWidth() / 8;
    if (std::optional<std::string> why = checkPlannedSizes(shape, *maxTokens))
      return emitOpError() << "layer_c11: " << *why;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// RouteOp
//===----------------------------------------------------------------------===//

LogicalResult RouteOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyExtents(op)))
    return failure();
  FailureOr<int64_t> experts = verifyRouterWeight(op, getX(), getRouterWeight());
  if (failed(experts) ||
      failed(verifyRoutingForExperts(op, getRouting(), *experts,
                                     getCorrectionBias())) ||
      failed(verifyLogitBias(op, "route_c10", getLogitBias(), *experts)))
    return failure();
  int64_t tokens = getX().getType().getDimSize(0);
  int64_t topK = getRouting().getTopK();
  for (auto [name, value] : {std::pair<StringRef, Value>{"expert_ids", getExpertIds()},
                             {"expert_weights", getExpertWeights()}}) {
    auto type = tensorType(value);
    if (type.getRank() != 2 || !agree(type.getDimSize(0), tokens) ||
        type.getDimSize(1) != topK)
      return emitOpError() << "route_c8: " << name << " must be [T=" << dimStr(tokens)
                           << ", top_k=" << topK << "], got " << type;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// DispatchOp
//===----------------------------------------------------------------------===//

LogicalResult DispatchOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyExtents(op)) ||
      failed(expectRank(op, "dispatch_c1", "x", getX(), 2)) ||
      failed(expectRank(op, "dispatch_c1", "expert_ids", getExpertIds(), 2)))
    return failure();
  ArrayRef<int64_t> x = getX().getType().getShape();
  ArrayRef<int64_t> ids = getExpertIds().getType().getShape();
  if (!agree(x[0], ids[0]) || ShapedType::isDynamic(ids[1]))
    return emitOpError() << "dispatch_c1: expert_ids " << getExpertIds().getType()
                         << " must be [T, k] with a static k and T of x "
                         << getX().getType();
  if (failed(expectRank(op, "dispatch_c2", "dispatched", getDispatched(), 2)) ||
      failed(expectSameElementType(op, "dispatch_c2", "dispatched",
                                   getDispatched(), getX().getType().getElementType())))
    return failure();
  ArrayRef<int64_t> rows = getDispatched().getType().getShape();
  // dispatch_c6: rows and pairs are numbered in i32; the operands of every
  // product below are bounded first, so the products fit int64_t.
  const int64_t numExperts = int64_t(getNumExperts());
  const int64_t capacityValue = int64_t(getCapacity().value_or(0));
  const int64_t rowTile = getRowTileOrOne();
  if (ids[1] < 1 || ids[1] > limits::kMaxTopK || numExperts > limits::kMaxExperts ||
      capacityValue > kMaxI32 || !within(x[0], 0, kMaxI32) || rowTile > kMaxRowTile ||
      (!ShapedType::isDynamic(x[0]) &&
       paddedRows(x[0] * ids[1], numExperts, rowTile) > kMaxI32) ||
      capacityValue * numExperts > kMaxI32)
    return emitOpError() << "dispatch_c6: k in [1, " << limits::kMaxTopK
                         << "], num_experts at most " << limits::kMaxExperts
                         << ", row_tile at most " << kMaxRowTile
                         << ", and static rows, T*k pairs (plus padding) and "
                            "num_experts*capacity slots at most 2^31 - 1 (i32 row ids), got "
                         << getX().getType() << ", " << getExpertIds().getType()
                         << ", num_experts = " << numExperts << ", capacity = "
                         << capacityValue << ", row_tile = " << rowTile;
  if (std::optional<uint64_t> capacity = getCapacity()) {
    int64_t slots = capacityValue * numExperts;
    if (!ShapedType::isDynamic(x[0]) && x[0] > int64_t(*capacity))
      return emitOpError() << "dispatch_c5: " << x[0]
                           << " tokens do not fit the masked layout's capacity of "
                           << *capacity << " rows per expert";
    if (capacityValue % rowTile != 0)
      return emitOpError() << "dispatch_c7: row_tile " << rowTile
                           << " must divide the capacity " << capacityValue;
    if (rows[0] != slots || !agree(rows[1], x[1]))
      return emitOpError() << "dispatch_c5: with capacity, dispatched must be "
                              "[num_experts*capacity="
                           << slots << ", H=" << dimStr(x[1]) << "], got "
                           << getDispatched().getType();
  }
  int64_t expectedRows = ShapedType::isDynamic(x[0]) || ShapedType::isDynamic(ids[1])
                             ? ShapedType::kDynamic
                             : paddedRows(x[0] * ids[1], numExperts, rowTile);
  if (getCapacity())
    expectedRows = rows[0];
  if (!agree(rows[0], expectedRows) || !agree(rows[1], x[1]))
    return emitOpError() << "dispatch_c2: dispatched must be [T*k+min(E,T*k)*(row_tile-1)="
                         << dimStr(expectedRows) << ", H=" << dimStr(x[1])
                         << "], got " << getDispatched().getType();
  if (failed(expectRank(op, "dispatch_c3", "row_expert", getRowExpert(), 1)))
    return failure();
  if (!agree(getRowExpert().getType().getDimSize(0), rows[0]))
    return emitOpError() << "dispatch_c3: row_expert " << getRowExpert().getType()
                         << " must have one entry per dispatched row";
  if (getSlot().getType().getShape() != ids &&
      (getSlot().getType().getRank() != 2 ||
       !agree(getSlot().getType().getDimSize(0), ids[0]) ||
       getSlot().getType().getDimSize(1) != ids[1]))
    return emitOpError() << "dispatch_c4: slot " << getSlot().getType()
                         << " must have the shape of expert_ids "
                         << getExpertIds().getType();
  if (Value offsets = getExpertOffsets()) {
    auto type = cast<RankedTensorType>(offsets.getType());
    if (type.getRank() != 1 || type.getDimSize(0) != numExperts + 1)
      return emitOpError() << "dispatch_c7: expert_offsets " << type
                           << " must be [num_experts + 1 = " << numExperts + 1 << "]";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// GroupedMatmulOp
//===----------------------------------------------------------------------===//

LogicalResult GroupedMatmulOp::verify() {
  Operation *op = getOperation();
  const bool fp8 = getInput().getType().getElementType().isInteger(8);
  const bool fp8Weights = getWeight().getType().getElementType().isInteger(8);
  // The compute type: the activations', or the weights' for FP8 inputs, or
  // the result's when both are FP8.
  Type elem = !fp8 ? getInput().getType().getElementType()
              : !fp8Weights ? getWeight().getType().getElementType()
                            : getResult().getType().getElementType();
  if (failed(verifyExtents(op)) ||
      failed(expectRank(op, "gmm_c1", "input", getInput(), 2)) ||
      failed(expectRank(op, "gmm_c1", "weight", getWeight(), 3)) ||
      (!fp8Weights &&
       failed(expectSameElementType(op, "gmm_c1", "weight", getWeight(), elem))) ||
      failed(verifyWeightScales(op, "weight", getWeight(), getWeightScales(),
                                getWeightBlock())))
    return failure();
  ArrayRef<int64_t> in = getInput().getType().getShape();
  ArrayRef<int64_t> w = getWeight().getType().getShape();
  if (fp8 != static_cast<bool>(getScales()))
    return emitOpError() << "gmm_c4: FP8 codes (i8 input) come with scales, "
                            "and scales only with them";
  if (fp8) {
    auto scales = getScales().getType();
    int64_t groups = scales.getRank() == 2 ? scales.getDimSize(1) : ShapedType::kDynamic;
    if (scales.getRank() != 2 || !agree(scales.getDimSize(0), in[0]) ||
        ShapedType::isDynamic(groups) || groups < 1 ||
        ShapedType::isDynamic(in[1]) || in[1] % groups != 0)
      return emitOpError() << "gmm_c4: scales must be [N, G] with G dividing a "
                              "static K, got "
                           << scales << " for input " << getInput().getType();
  }
  if (!agree(in[1], w[2]))
    return emitOpError() << "gmm_c1: weight " << getWeight().getType()
                         << " must be [E, M, K] with K = " << dimStr(in[1])
                         << " of input " << getInput().getType();
  if (failed(expectRank(op, "gmm_c2", "row_expert", getRowExpert(), 1)))
    return failure();
  if (!agree(getRowExpert().getType().getDimSize(0), in[0]))
    return emitOpError() << "gmm_c2: row_expert " << getRowExpert().getType()
                         << " must have one entry per input row";
  auto result = getResult().getType();
  if (failed(expectRank(op, "gmm_c3", "result", getResult(), 2)) ||
      failed(expectSameElementType(op, "gmm_c3", "result", getResult(), elem)))
    return failure();
  if (!agree(result.getDimSize(0), in[0]) || !agree(result.getDimSize(1), w[1]))
    return emitOpError() << "gmm_c3: result must be [N=" << dimStr(in[0])
                         << ", M=" << dimStr(w[1]) << "], got " << result;
  if (Value offsets = getExpertOffsets()) {
    auto type = cast<RankedTensorType>(offsets.getType());
    if (type.getRank() != 1 ||
        (!ShapedType::isDynamic(w[0]) && type.getDimSize(0) != w[0] + 1))
      return emitOpError() << "gmm_c5: expert_offsets " << type
                           << " must be [E + 1] for weight " << getWeight().getType();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// ActivationOp
//===----------------------------------------------------------------------===//

LogicalResult ActivationOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyExtents(op)) ||
      failed(expectRank(op, "act_c1", "input", getInput(), 2)) ||
      failed(expectRank(op, "act_c1", "result", getResult(), 2)) ||
      failed(expectSameElementType(op, "act_c1", "result", getResult(),
                                   getInput().getType().getElementType())) ||
      failed(verifyActivationParameters(op, "act_c3", getKind(), getSwigluAlpha(),
                                        getSwigluLimit())))
    return failure();
  ArrayRef<int64_t> in = getInput().getType().getShape();
  ArrayRef<int64_t> out = getResult().getType().getShape();
  if (ShapedType::isDynamic(in[1]) || in[1] % 2 != 0)
    return emitOpError() << "act_c2: a gated activation needs a static, even "
                            "number of input columns (gate and up), got "
                         << getInput().getType();
  if (!agree(out[0], in[0]) || out[1] != in[1] / 2)
    return emitOpError() << "act_c2: result must be [N=" << dimStr(in[0])
                         << ", " << in[1] / 2 << "], got " << getResult().getType();
  return success();
}

//===----------------------------------------------------------------------===//
// CombineOp
//===----------------------------------------------------------------------===//

LogicalResult CombineOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyExtents(op)) ||
      failed(expectRank(op, "combine_c1", "expert_out", getExpertOut(), 2)) ||
      failed(expectRank(op, "combine_c1", "slot", getSlot(), 2)) ||
      failed(expectRank(op, "combine_c1", "weights", getWeights(), 2)))
    return failure();
  ArrayRef<int64_t> slot = getSlot().getType().getShape();
  ArrayRef<int64_t> weights = getWeights().getType().getShape();
  if (!agree(slot[0], weights[0]) || !agree(slot[1], weights[1]))
    return emitOpError() << "combine_c1: weights " << getWeights().getType()
                         << " must have the shape of slot " << getSlot().getType();
  auto result = getResult().getType();
  if (failed(expectRank(op, "combine_c2", "result", getResult(), 2)) ||
      failed(expectSameElementType(op, "combine_c2", "result", getResult(),
                                   getExpertOut().getType().getElementType())))
    return failure();
  if (!agree(result.getDimSize(0), slot[0]) ||
      !agree(result.getDimSize(1), getExpertOut().getType().getDimSize(1)))
    return emitOpError() << "combine_c2: result must be [T=" << dimStr(slot[0])
                         << ", H=" << dimStr(getExpertOut().getType().getDimSize(1))
                         << "], got " << result;
  return success();
}

//===----------------------------------------------------------------------===//
// EpDispatchOp, EpCombineOp
//===----------------------------------------------------------------------===//

LogicalResult EpDispatchOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyExtents(op)) ||
      failed(expectRank(op, "ep_dispatch_c1", "x", getX(), 2)) ||
      failed(expectRank(op, "ep_dispatch_c1", "expert_ids", getExpertIds(), 2)) ||
      failed(expectRank(op, "ep_dispatch_c1", "expert_weights", getExpertWeights(), 2)))
    return failure();
  if (static_cast<bool>(getExpertRank()) == static_cast<bool>(getPhysToLog()))
    return emitOpError() << "ep_dispatch_c6: give expert_rank or a placement, "
                            "not both or neither";
  if (getPerBatchReplicas() && !getPhysToLog())
    return emitOpError() << "ep_dispatch_c10: per_batch_replicas chooses among "
                            "a placement's replicas: it needs placement(...)";
  if (std::optional<uint64_t> experts = getExperts()) {
    if (!getPhysToLog())
      return emitOpError() << "ep_dispatch_c11: experts (" << *experts
                           << ") states a placement's logical experts: it needs placement(...)";
    int64_t slots = getPhysToLog().getType().getDimSize(0);
    if (!ShapedType::isDynamic(slots) && int64_t(*experts) > slots)
      return emitOpError() << "ep_dispatch_c11: experts (" << *experts
                           << ") exceeds the placement's " << slots
                           << " slots: every expert needs one";
  }
  Value map = getExpertRank() ? getExpertRank() : getPhysToLog();
  if (failed(expectRank(op, "ep_dispatch_c1", getExpertRank() ? "expert_rank" : "phys_to_log",
                        map, 1)))
    return failure();
  if (getPhysToLog() && getReplicaShare().getType().getShape() !=
                            getPhysToLog().getType().getShape())
    return emitOpError() << "ep_dispatch_c6: replica_share " << getReplicaShare().getType()
                         << " must have the shape of phys_to_log "
                         << getPhysToLog().getType();
  ArrayRef<int64_t> x = getX().getType().getShape();
  ArrayRef<int64_t> ids = getExpertIds().getType().getShape();
  ArrayRef<int64_t> weights = getExpertWeights().getType().getShape();
  if (!agree(ids[0], x[0]) || !agree(weights[0], x[0]) || !agree(weights[1], ids[1]))
    return emitOpError() << "ep_dispatch_c1: x [T,H], expert_ids [T,k] and "
                            "expert_weights [T,k] disagree: "
                         << getX().getType() << ", " << getExpertIds().getType()
                         << ", " << getExpertWeights().getType();
  // ep_dispatch_c8: the maxima moe-plan-buffers and the runtime multiply.
  const int64_t capacity = int64_t(getCapacity());
  if (int64_t(getEp().value_or(1)) > limits::kMaxRanks ||
      int64_t(getMaxTokens().value_or(0)) > limits::kMaxTokens ||
      int64_t(getSlots().value_or(0)) > limits::kMaxTokens || capacity > kMaxRows ||
      !within(x[0], 0, limits::kMaxTokens) || !within(x[1], 1, limits::kMaxHidden) ||
      !within(ids[1], 1, limits::kMaxTopK))
    return emitOpError() << "ep_dispatch_c8: ep at most " << limits::kMaxRanks
                         << ", max_tokens, slots and tokens at most " << limits::kMaxTokens
                         << ", capacity at most " << kMaxRows << ", hidden size in [1, "
                         << limits::kMaxHidden << "] and top-k in [1, " << limits::kMaxTopK
                         << "]";
  auto received = getReceived().getType();
  // FP8 codes arrive as i8 (ep_dispatch_c7); activations keep x's type.
  if (failed(expectRank(op, "ep_dispatch_c2", "received", getReceived(), 2)) ||
      (!received.getElementType().isInteger(8) &&
       failed(expectSameElementType(op, "ep_dispatch_c2", "received", getReceived(),
                                    getX().getType().getElementType()))) ||
      failed(expectRank(op, "ep_dispatch_c2", "local_ids", getLocalIds(), 2)) ||
      failed(expectRank(op, "ep_dispatch_c2", "local_weights", getLocalWeights(), 2)))
    return failure();
  if (!agree(received.getDimSize(1), x[1]) ||
      !agree(getLocalIds().getType().getDimSize(1), ids[1]) ||
      !agree(getLocalWeights().getType().getDimSize(1), ids[1]) ||
      !agree(getLocalIds().getType().getDimSize(0), received.getDimSize(0)) ||
      !agree(getLocalWeights().getType().getDimSize(0), received.getDimSize(0)))
    return emitOpError() << "ep_dispatch_c2: results must be [R,H], [R,k], [R,k] "
                            "with H and k of the operands";
  if (std::optional<uint64_t> ep = getEp()) {
    int64_t experts = cast<RankedTensorType>(map.getType()).getDimSize(0);
    if (!ShapedType::isDynamic(experts) && experts % int64_t(*ep) != 0)
      return emitOpError() << "ep_dispatch_c5: ep = " << *ep << " does not divide the "
                           << experts << (getExpertRank() ? " experts of expert_rank"
                                                          : " slots of phys_to_log");
  }
  if (!getSlots() && !ShapedType::isDynamic(received.getDimSize(0)) &&
      received.getDimSize(0) != int64_t(getCapacity()))
    return emitOpError() << "ep_dispatch_c9: without slots the received rows are "
                            "dynamic (the exchanged counts decide them) or the "
                            "capacity (masked past the received ones), got "
                         << received << " and capacity " << getCapacity();
  if (std::optional<uint64_t> slots = getSlots()) {
    int64_t rows = received.getDimSize(0);
    if (ShapedType::isDynamic(rows) || rows % int64_t(*slots) != 0 ||
        rows != int64_t(getCapacity()))
      return emitOpError() << "ep_dispatch_c4: with slots = " << *slots
                           << " the received rows are static, a multiple of "
                              "slots (ep * slots) and equal to capacity, got "
                           << received << " and capacity " << getCapacity();
    if (getMaxTokens() && *getMaxTokens() != *slots)
      return emitOpError() << "ep_dispatch_c4: with slots, max_tokens must be "
                              "slots, got "
                           << *getMaxTokens() << " and " << *slots;
  }
  const bool codes = received.getElementType().isInteger(8);
  if (codes != static_cast<bool>(getReceivedScales()) || (codes && !getQuantization()))
    return emitOpError() << "ep_dispatch_c7: i8 received rows are FP8 codes: they "
                            "need quantization and received_scales, which need them";
  if (auto quant = getQuantization()) {
    int64_t group = *quant == DispatchQuantization::fp8_e4m3_g128 ? 128 : 32;
    if (codes) {
      auto scales = getReceivedScales().getType();
      if (scales.getRank() != 2 || !agree(scales.getDimSize(0), received.getDimSize(0)) ||
          (!ShapedType::isDynamic(x[1]) && scales.getDimSize(1) != x[1] / group))
        return emitOpError() << "ep_dispatch_c7: received_scales must be [R, H/"
                             << group << "], got " << scales;
    }
    if (ShapedType::isDynamic(x[1]) || x[1] % group != 0)
      return emitOpError() << "ep_dispatch_c3: " << stringifyDispatchQuantization(*quant)
                           << " needs a static hidden size that is a multiple of "
                           << group << ", got " << getX().getType();
  }
  return success();
}

LogicalResult EpCombineOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyExtents(op)) ||
      failed(expectRank(op, "ep_combine_c1", "partial", getPartial(), 2)) ||
      failed(expectRank(op, "ep_combine_c1", "result", getResult(), 2)) ||
      failed(expectSameElementType(op, "ep_combine_c1", "result", getResult(),
                                   getPartial().getType().getElementType())))
    return failure();
  if (!agree(getResult().getType().getDimSize(1),
             getPartial().getType().getDimSize(1)))
    return emitOpError() << "ep_combine_c1: result " << getResult().getType()
                         << " and partial " << getPartial().getType()
                         << " disagree on the hidden size";
  // The handle names the dispatch: rows go back to its tokens, one partial
  // row per received row.
  if (auto dispatch = getHandle().getDefiningOp<EpDispatchOp>())
    if (!agree(getResult().getType().getDimSize(0),
               dispatch.getX().getType().getDimSize(0)) ||
        !agree(getPartial().getType().getDimSize(0),
               dispatch.getReceived().getType().getDimSize(0)))
      return emitOpError() << "ep_combine_c2: result " << getResult().getType()
                           << " must have the rows of the dispatched x "
                           << dispatch.getX().getType() << " and partial "
                           << getPartial().getType() << " those of the received rows "
                           << dispatch.getReceived().getType();
  return success();
}

//===----------------------------------------------------------------------===//
// TpSliceOp, TpGatherOp
//===----------------------------------------------------------------------===//

LogicalResult TpSliceOp::verify() {
  if (failed(verifyExtents(getOperation())))
    return failure();
  auto x = getX().getType(), slice = getSlice().getType();
  if (x.getRank() != 2 || slice.getRank() != 2 ||
      slice.getElementType() != x.getElementType() ||
      !agree(slice.getDimSize(1), x.getDimSize(1)))
    return emitOpError() << "tp_c1: slice " << slice << " must be rows of x " << x;
  // Which rows a rank takes depends on its rank unless every rank takes the
  // same count: a static T that tp divides.
  int64_t rows = slice.getDimSize(0), tokens = x.getDimSize(0);
  int64_t tp = int64_t(getTp());
  if (!ShapedType::isDynamic(rows) &&
      (ShapedType::isDynamic(tokens) || tokens % tp != 0 || rows != tokens / tp))
    return emitOpError() << "tp_c3: slice " << slice << " may state a static row count "
                         << "only when every rank takes the same rows: x " << x
                         << " with a static T that tp = " << tp << " divides, T/tp rows";
  return success();
}

LogicalResult TpGatherOp::verify() {
  if (failed(verifyExtents(getOperation())))
    return failure();
  auto slice = getSlice().getType(), full = getFull().getType(),
       result = getResult().getType();
  if (slice.getRank() != 2 || full.getRank() != 2 || result.getRank() != 2 ||
      result.getElementType() != slice.getElementType() ||
      !agree(result.getDimSize(0), full.getDimSize(0)) ||
      !agree(result.getDimSize(1), slice.getDimSize(1)))
    return emitOpError() << "tp_c2: result " << result << " must have the rows of "
                         << full << " and the columns of " << slice;
  return success();
}

//===----------------------------------------------------------------------===//
// ChunkLoopOp
//===----------------------------------------------------------------------===//

LogicalResult ChunkLoopOp::verify() {
  if (failed(verifyExtents(getOperation())))
    return failure();
  auto x = getX().getType();
  Block &body = getBody().front();
  if (x.getRank() != 2 || getY().getType() != x)
    return emitOpError() << "chunk_c1: x must be [T,H] and the result of the "
                            "same type, got "
                         << x << " -> " << getY().getType();
  auto chunk = RankedTensorType::get({ShapedType::kDynamic, x.getDimSize(1)},
                                     x.getElementType());
  if (body.getNumArguments() != 1 || body.getArgument(0).getType() != chunk)
    return emitOpError() << "chunk_c2: the body takes one argument of type "
                         << chunk;
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield || yield.getValue().getType().getRank() != 2 ||
      yield.getValue().getType().getElementType() != x.getElementType() ||
      !agree(yield.getValue().getType().getDimSize(1), x.getDimSize(1)))
    return emitOpError() << "chunk_c3: the body must end in moe.yield of [?, "
                         << dimStr(x.getDimSize(1)) << "] rows of "
                         << x.getElementType();
  return success();
}

/// The activation in an op's format, a bare keyword (`swiglu`): the enum
/// attribute's own printer starts with a space, which the op's format
/// already puts before it.
static ParseResult parseActivationKeyword(OpAsmParser &parser, ActivationAttr &kind) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return failure();
  std::optional<Activation> value = symbolizeActivation(keyword);
  if (!value)
    return parser.emitError(loc) << "expected an activation (swiglu, clamped_swiglu), got '"
                                 << keyword << "'";
  kind = ActivationAttr::get(parser.getContext(), *value);
  return success();
}

static void printActivationKeyword(OpAsmPrinter &printer, Operation *, ActivationAttr kind) {
  printer << stringifyActivation(kind.getValue());
}

#define GET_OP_CLASSES
#include "moe/Dialect/MoE/IR/MoEOps.cpp.inc"
