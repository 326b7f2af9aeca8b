//===- MoEToLinalg.cpp - lower moe compute ops to linalg on tensors -------===//
#include "LinalgBuilders.h"
#include "moe/Conversion/PaddedRows.h"
#include "moe/Conversion/Passes.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Transforms/DialectConversion.h"

#include <limits>

namespace mlir::moe {
#define GEN_PASS_DEF_CONVERTMOETOLINALG
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::lowering;

namespace {
using Dims = SmallVector<unsigned>;

Value constF32(OpBuilder &b, Location loc, double v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}
Value constI32(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
}
Value indexToI32(OpBuilder &b, Location loc, Value index) {
  return arith::IndexCastOp::create(b, loc, b.getI32Type(), index);
}
Value i32ToIndex(OpBuilder &b, Location loc, Value v) {
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), v);
}
/// `cond ? value : zero` added to `acc`.
Value addIf(OpBuilder &b, Location loc, Value cond, Value value, Value acc) {
  Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(value.getType()));
  Value picked = arith::SelectOp::create(b, loc, cond, value, zero);
  if (isa<FloatType>(value.getType()))
    return arith::AddFOp::create(b, loc, acc, picked);
  return arith::AddIOp::create(b, loc, acc, picked);
}
/// `approximable`: the exp may become a polynomial (an activation's,
/// moe-approximate-activation-exp); routing keeps the exact one, since its
/// scores decide the chosen experts.
Value sigmoid(OpBuilder &b, Location loc, Value v, bool approximable = false) {
  Value one = constF32(b, loc, 1.0);
  auto e = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, v));
  if (approximable)
    e->setAttr(kApproximableExp, b.getUnitAttr());
  return arith::DivFOp::create(b, loc, one, arith::AddFOp::create(b, loc, one, e));
}

//===----------------------------------------------------------------------===//
// moe.route
//===----------------------------------------------------------------------===//

/// rank[t,g,s] = how many entries of v[t,g,:] beat v[t,g,s] (`beats`). The
/// ranks of a row are a permutation of 0..S-1.
Value buildSegmentRank(ImplicitLocOpBuilder &b, Value v) {
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, b.getLoc(), v);
  Value init = buildFilled(b, sizes, b.getI32IntegerAttr(0));
  return buildGeneric(
      b, {v, v}, init, {Dims{0, 1, 2}, Dims{0, 1, 3}, Dims{0, 1, 2}}, 4, {3},
      [](OpBuilder &nb, Location loc, ValueRange idx, ValueRange args) -> Value {
        Value self = args[0], other = args[1];
        return addIf(nb, loc, beats(nb, loc, other, self, idx[3], idx[2]),
                     constI32(nb, loc, 1), args[2]);
      });
}

/// Ranks of a [T, N] tensor along N.
Value buildRowRank(ImplicitLocOpBuilder &b, Value v, OpFoldResult tokens,
                   int64_t n) {
  Value v3 = expand(b, v, {tokens, b.getIndexAttr(1), b.getIndexAttr(n)},
                    {{0}, {1, 2}});
  return collapse(b, buildSegmentRank(b, v3), {{0}, {1, 2}});
}

struct RouteLowering : OpRewritePattern<RouteOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RouteOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    RoutingAttr routing = op.getRouting();
    int64_t experts = op.getRouterWeight().getType().getDimSize(0);
    int64_t topK = routing.getTopK();
    OpFoldResult tokens = tensor::getMixedSize(b, b.getLoc(), op.getX(), 0);
    SmallVector<OpFoldResult> te = {tokens, b.getIndexAttr(experts)};
    SmallVector<OpFoldResult> tk = {tokens, b.getIndexAttr(topK)};
    Type f32 = b.getF32Type();

    // logits[t,e] = sum_h x[t,h] * w[e,h]
    Value logits = buildGeneric(
        b, {op.getX(), op.getRouterWeight()}, buildFilled(b, te, b.getF32FloatAttr(0)),
        {Dims{0, 2}, Dims{1, 2}, Dims{0, 1}}, 3, {2},
        [](OpBuilder &nb, Location loc, ValueRange, ValueRange a) -> Value {
          // Named first: argument order is unspecified in C++.
          Value lhs = toF32(nb, loc, a[0]), rhs = toF32(nb, loc, a[1]);
          Value p = arith::MulFOp::create(nb, loc, lhs, rhs);
          return arith::AddFOp::create(nb, loc, a[2], p);
        });
    if (Value bias = op.getLogitBias()) // gpt-oss: before anything reads them
      logits = buildGeneric(
          b, {logits, bias}, buildEmpty(b, te, f32), {Dims{0, 1}, Dims{1}, Dims{0, 1}}, 2,
          {}, [](OpBuilder &nb, Location loc, ValueRange, ValueRange a) -> Value {
            return arith::AddFOp::create(nb, loc, a[0], a[1]);
          });
    if (routing.getLogitsBf16()) // a bf16 model's router rounds them
      logits = buildElementwise(b, logits, te, [](OpBuilder &nb, Location loc, Value v) {
        Value rounded = arith::TruncFOp::create(nb, loc, nb.getBF16Type(), v);
        return arith::ExtFOp::create(nb, loc, nb.getF32Type(), rounded).getResult();
      });
    Value scores = routing.getScore() == ScoreFunction::softmax
                       ? buildSoftmax(b, logits, tokens, te)
                       : buildElementwise(b, logits, te,
                                          [](OpBuilder &nb, Location loc, Value v) {
                                            return sigmoid(nb, loc, v);
                                          });
    Value selection = scores;
    if (Value bias = op.getCorrectionBias())
      selection = buildGeneric(
          b, {scores, bias}, buildEmpty(b, te, f32),
          {Dims{0, 1}, Dims{1}, Dims{0, 1}}, 2, {},
          [](OpBuilder &nb, Location loc, ValueRange, ValueRange a) -> Value {
            return arith::AddFOp::create(nb, loc, a[0], a[1]);
          });
    if (routing.getNGroup() > 1)
      selection = maskUnselectedGroups(b, selection, tokens, experts, routing);
    Value rank = buildRowRank(b, selection, tokens, experts);

    // The j-th choice is the expert whose rank is j.
    auto pickByRank = [&](Value source, TypedAttr zero) {
      return buildGeneric(
          b, source ? ValueRange{rank, source} : ValueRange{rank},
          buildFilled(b, tk, zero),
          source ? ArrayRef<Dims>{Dims{0, 2}, Dims{0, 2}, Dims{0, 1}}
                 : ArrayRef<Dims>{Dims{0, 2}, Dims{0, 1}},
          3, {2},
          [&](OpBuilder &nb, Location loc, ValueRange idx, ValueRange a) -> Value {
            Value isChoice = arith::CmpIOp::create(
                nb, loc, arith::CmpIPredicate::eq, a[0], indexToI32(nb, loc, idx[1]));
            Value value = source ? a[1] : indexToI32(nb, loc, idx[2]);
            return addIf(nb, loc, isChoice, value, a.back());
          });
    };
    Value ids = pickByRank(Value(), b.getI32IntegerAttr(0));
    Value weights = pickByRank(scores, b.getF32FloatAttr(0));
    weights = normalizeAndScale(b, weights, tokens, tk, routing);
    // The op may state a static token count that the lowering sees as dynamic.
    auto castTo = [&](Value v, Type type) -> Value {
      return v.getType() == type ? v : tensor::CastOp::create(b, type, v).getResult();
    };
    rewriter.replaceOp(op, {castTo(ids, op.getExpertIds().getType()),
                            castTo(weights, op.getExpertWeights().getType())});
    return success();
  }

  static Value buildElementwise(ImplicitLocOpBuilder &b, Value v,
                                ArrayRef<OpFoldResult> sizes,
                                function_ref<Value(OpBuilder &, Location, Value)> fn) {
    unsigned rank = sizes.size();
    Dims all = llvm::to_vector(llvm::seq<unsigned>(0, rank));
    return buildGeneric(b, v, buildEmpty(b, sizes, b.getF32Type()), {all, all},
                        rank, {},
                        [&](OpBuilder &nb, Location loc, ValueRange, ValueRange a) {
                          return fn(nb, loc, a[0]);
                        });
  }

  /// Row-wise softmax with the row maximum subtracted first.
  static Value buildSoftmax(ImplicitLocOpBuilder &b, Value logits,
                            OpFoldResult tokens, ArrayRef<OpFoldResult> te) {
    Value rowMax = buildGeneric(
        b, logits,
        buildFilled(b, {tokens}, b.getF32FloatAttr(-std::numeric_limits<float>::infinity())),
        {Dims{0, 1}, Dims{0}}, 2, {1},
        [](OpBuilder &nb, Location loc, ValueRange, ValueRange a) -> Value {
          return arith::MaximumFOp::create(nb, loc, a[0], a[1]);
        });
    Value exps = buildGeneric(
        b, {logits, rowMax}, buildEmpty(b, te, b.getF32Type()),
        {Dims{0, 1}, Dims{0}, Dims{0, 1}}, 2, {},
        [](OpBuilder &nb, Location loc, ValueRange, ValueRange a) -> Value {
          return math::ExpOp::create(nb, loc,
                                     arith::SubFOp::create(nb, loc, a[0], a[1]));
        });
    Value rowSum = buildGeneric(
        b, exps, buildFilled(b, {tokens}, b.getF32FloatAttr(0)),
        {Dims{0, 1}, Dims{0}}, 2, {1},
        [](OpBuilder &nb, Location loc, ValueRange, ValueRange a) -> Value {
          return arith::AddFOp::create(nb, loc, a[0], a[1]);
        });
    return buildGeneric(
        b, {exps, rowSum}, buildEmpty(b, te, b.getF32Type()),
        {Dims{0, 1}, Dims{0}, Dims{0, 1}}, 2, {},
        [](OpBuilder &nb, Location loc, ValueRange, ValueRange a) -> Value {
          return arith::DivFOp::create(nb, loc, a[0], a[1]);
        });
  }

  /// Keeps the selection scores of the topk_group best groups (ranked by the
  /// sum of their two best scores, or by their best with group_max) and sets
  /// the others to -inf.
  static Value maskUnselectedGroups(ImplicitLocOpBuilder &b, Value selection,
                                    OpFoldResult tokens, int64_t experts,
                                    RoutingAttr routing) {
    int64_t groups = routing.getNGroup(), perGroup = experts / groups;
    SmallVector<OpFoldResult> tgs = {tokens, b.getIndexAttr(groups),
                                     b.getIndexAttr(perGroup)};
    Value sel3 = expand(b, selection, tgs, {{0}, {1, 2}});
    Value inGroupRank = buildSegmentRank(b, sel3);
    Value groupScore = buildGeneric(
        b, {sel3, inGroupRank},
        buildFilled(b, {tokens, b.getIndexAttr(groups)}, b.getF32FloatAttr(0)),
        {Dims{0, 1, 2}, Dims{0, 1, 2}, Dims{0, 1}}, 3, {2},
        [counted = routing.getGroupMax() ? 1 : 2](OpBuilder &nb, Location loc,
                                                  ValueRange, ValueRange a) -> Value {
          Value best = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::slt,
                                             a[1], constI32(nb, loc, counted));
          return addIf(nb, loc, best, a[0], a[2]);
        });
    Value groupRank = buildRowRank(b, groupScore, tokens, groups);
    int64_t keep = routing.getTopkGroup();
    Value masked = buildGeneric(
        b, {sel3, groupRank}, buildEmpty(b, tgs, b.getF32Type()),
        {Dims{0, 1, 2}, Dims{0, 1}, Dims{0, 1, 2}}, 3, {},
        [keep](OpBuilder &nb, Location loc, ValueRange, ValueRange a) -> Value {
          Value kept = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::slt,
                                             a[1], constI32(nb, loc, keep));
          Value ninf = constF32(nb, loc, -std::numeric_limits<float>::infinity());
          return arith::SelectOp::create(nb, loc, kept, a[0], ninf);
        });
    return collapse(b, masked, {{0}, {1, 2}});
  }

  static Value normalizeAndScale(ImplicitLocOpBuilder &b, Value weights,
                                 OpFoldResult tokens, ArrayRef<OpFoldResult> tk,
                                 RoutingAttr routing) {
    double scale = routing.getScale().convertToDouble();
    if (!routing.getNormalize() && scale == 1.0)
      return weights;
    Value denominator = buildFilled(b, {tokens}, b.getF32FloatAttr(1.0));
    if (routing.getNormalize())
      denominator = buildGeneric(
          b, weights, buildFilled(b, {tokens}, b.getF32FloatAttr(0)),
          {Dims{0, 1}, Dims{0}}, 2, {1},
          [](OpBuilder &nb, Location loc, ValueRange, ValueRange a) -> Value {
            return arith::AddFOp::create(nb, loc, a[0], a[1]);
          });
    return buildGeneric(
        b, {weights, denominator}, buildEmpty(b, tk, b.getF32Type()),
        {Dims{0, 1}, Dims{0}, Dims{0, 1}}, 2, {},
        [scale](OpBuilder &nb, Location loc, ValueRange, ValueRange a) -> Value {
          Value w = arith::DivFOp::create(nb, loc, a[0], a[1]);
          return arith::MulFOp::create(nb, loc, w, constF32(nb, loc, scale));
        });
  }
};

//===----------------------------------------------------------------------===//
// moe.dispatch (one rank): a stable counting sort of (token, choice) by expert
//===----------------------------------------------------------------------===//

/// init[n] + #{m < n : ids[m] == ids[n]}: where a (token, choice) falls
/// among the earlier ones of its expert.
Value addRankAmongEqual(ImplicitLocOpBuilder &b, Value flatIds, Value init) {
  return buildGeneric(
      b, {flatIds, flatIds}, init, {Dims{0}, Dims{1}, Dims{0}}, 2, {1},
      [](OpBuilder &nb, Location loc, ValueRange idx, ValueRange a) -> Value {
        Value same = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::eq, a[0], a[1]);
        Value earlier = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::ult,
                                              idx[1], idx[0]);
        return addIf(nb, loc, arith::AndIOp::create(nb, loc, same, earlier),
                     constI32(nb, loc, 1), a[2]);
      });
}

struct DispatchLowering : OpRewritePattern<DispatchOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(DispatchOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    const int64_t experts = op.getNumExperts();
    const int64_t topK = op.getExpertIds().getType().getDimSize(1);
    const int64_t tile = op.getRowTileOrOne();
    Value x = op.getX();
    OpFoldResult tokens = tensor::getMixedSize(b, b.getLoc(), x, 0);
    OpFoldResult pairs = mulSize(b, tokens, topK);
    Value flatIds = collapse(b, op.getExpertIds(), {{0, 1}});
    // slot[n] = offsets[ids[n]] + #{m < n : ids[m] == ids[n]}, or -1 for a
    // choice of another rank (a negative id).
    Value offsets, rowsTotal;
    if (std::optional<uint64_t> capacity = op.getCapacity()) {
      if (failed(checkCapacity(op, b, int64_t(*capacity))))
        return failure();
      offsets = buildGeneric(
          b, ValueRange{}, buildEmpty(b, {b.getIndexAttr(experts + 1)}, b.getI32Type()),
          {Dims{0}}, 1, {},
          [capacity](OpBuilder &nb, Location loc, ValueRange idx, ValueRange) -> Value {
            // Named first: argument order is unspecified in C++.
            Value expert = indexToI32(nb, loc, idx[0]);
            Value rows = constI32(nb, loc, int64_t(*capacity));
            return arith::MulIOp::create(nb, loc, expert, rows);
          });
      rowsTotal = arith::ConstantIndexOp::create(b, experts * int64_t(*capacity));
    } else {
      offsets = paddedOffsets(b, flatIds, experts, tile);
      rowsTotal = paddedRows(b, b.getLoc(), getValueOrCreateConstantIndexOp(b, b.getLoc(), pairs),
                             experts, tile);
    }
    Value base = buildGeneric(
        b, flatIds, buildEmpty(b, {pairs}, b.getI32Type()), {Dims{0}, Dims{0}}, 1,
        {}, [offsets](OpBuilder &nb, Location loc, ValueRange, ValueRange a) -> Value {
          Value foreign = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::slt,
                                                a[0], constI32(nb, loc, 0));
          Value id = arith::SelectOp::create(nb, loc, foreign, constI32(nb, loc, 0), a[0]);
          return tensor::ExtractOp::create(nb, loc, offsets,
                                           ValueRange{i32ToIndex(nb, loc, id)});
        });
    Value ranked = addRankAmongEqual(b, flatIds, base);
    Value flatSlot = buildGeneric(
        b, {flatIds, ranked}, buildEmpty(b, {pairs}, b.getI32Type()),
        {Dims{0}, Dims{0}, Dims{0}}, 1, {},
        [](OpBuilder &nb, Location loc, ValueRange, ValueRange a) -> Value {
          Value foreign = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::slt,
                                                a[0], constI32(nb, loc, 0));
          return arith::SelectOp::create(nb, loc, foreign, constI32(nb, loc, -1), a[1]);
        });
    OpFoldResult rows = getAsOpFoldResult(rowsTotal);
    OpFoldResult hidden = tensor::getMixedSize(b, b.getLoc(), x, 1);
    // source[r] = the n with slot[n] == r, or -1 for an unused row
    Value source = buildGeneric(
        b, flatSlot, buildFilled(b, {rows}, b.getI32IntegerAttr(-1)),
        {Dims{1}, Dims{0}}, 2, {1},
        [](OpBuilder &nb, Location loc, ValueRange idx, ValueRange a) -> Value {
          Value hit = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::eq,
                                            a[0], indexToI32(nb, loc, idx[0]));
          return arith::SelectOp::create(nb, loc, hit, indexToI32(nb, loc, idx[1]), a[1]);
        });
    Value rowExpert = buildGeneric(
        b, source, buildEmpty(b, {rows}, b.getI32Type()), {Dims{0}, Dims{0}}, 1,
        {}, [flatIds](OpBuilder &nb, Location loc, ValueRange, ValueRange a) -> Value {
          Value unused = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::slt,
                                               a[0], constI32(nb, loc, 0));
          Value n = arith::SelectOp::create(nb, loc, unused, constI32(nb, loc, 0), a[0]);
          Value id = tensor::ExtractOp::create(nb, loc, flatIds,
                                               ValueRange{i32ToIndex(nb, loc, n)});
          return arith::SelectOp::create(nb, loc, unused, constI32(nb, loc, -1), id);
        });
    Type element = op.getX().getType().getElementType();
    Value dispatched = buildGeneric(
        b, source, buildEmpty(b, {rows, hidden}, element),
        {Dims{0}, Dims{0, 1}}, 2, {},
        [x, topK, element](OpBuilder &nb, Location loc, ValueRange idx,
                           ValueRange a) -> Value {
          // An unused row reads nothing (x may have no rows at all). The
          // value travels as bits: x86 has no bf16 selects or phis and would
          // call a soft-float helper for them.
          auto bits = nb.getIntegerType(element.getIntOrFloatBitWidth());
          auto asBits = [&](OpBuilder &ob, Location ol, Value v) -> Value {
            return v.getType() == bits ? v : arith::BitcastOp::create(ob, ol, bits, v).getResult();
          };
          Value used = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::sge,
                                             a[0], constI32(nb, loc, 0));
          auto read = scf::IfOp::create(
              nb, loc, used,
              [&](OpBuilder &tb, Location tl) {
                Value k = arith::ConstantIndexOp::create(tb, tl, topK);
                Value token = arith::DivUIOp::create(tb, tl, i32ToIndex(tb, tl, a[0]), k);
                Value v = tensor::ExtractOp::create(tb, tl, x, ValueRange{token, idx[1]});
                scf::YieldOp::create(tb, tl, asBits(tb, tl, v));
              },
              [&](OpBuilder &eb, Location el) {
                Value zero = arith::ConstantOp::create(eb, el, eb.getIntegerAttr(bits, 0));
                scf::YieldOp::create(eb, el, zero);
              });
          Value read0 = read.getResult(0);
          return element == bits ? read0
                                 : arith::BitcastOp::create(nb, loc, element, read0).getResult();
        });
    Value slot = expand(b, flatSlot, {tokens, b.getIndexAttr(topK)}, {{0, 1}});
    SmallVector<Value> results = {castTo(b, dispatched, op.getDispatched()),
                                  castTo(b, rowExpert, op.getRowExpert()),
                                  castTo(b, slot, op.getSlot())};
    if (op.getExpertOffsets())
      results.push_back(castTo(b, offsets, op.getExpertOffsets()));
    rewriter.replaceOp(op, results);
    return success();
  }

  /// offsets[e] = sum over e' < e of counts[e'] rounded up to `tile`, for
  /// e in [0, experts]; negative ids count nowhere.
  static Value paddedOffsets(ImplicitLocOpBuilder &b, Value flatIds,
                             int64_t experts, int64_t tile) {
    TypedAttr zero = b.getI32IntegerAttr(0);
    Value counts = buildGeneric(
        b, flatIds, buildFilled(b, {b.getIndexAttr(experts)}, zero),
        {Dims{1}, Dims{0}}, 2, {1},
        [](OpBuilder &nb, Location loc, ValueRange idx, ValueRange a) -> Value {
          Value mine = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::eq,
                                             a[0], indexToI32(nb, loc, idx[0]));
          return addIf(nb, loc, mine, constI32(nb, loc, 1), a[1]);
        });
    return buildGeneric(
        b, counts, buildFilled(b, {b.getIndexAttr(experts + 1)}, zero),
        {Dims{1}, Dims{0}}, 2, {1},
        [tile](OpBuilder &nb, Location loc, ValueRange idx, ValueRange a) -> Value {
          Value before = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::ult,
                                               idx[1], idx[0]);
          Value padded = a[0];
          if (tile > 1) {
            Value t = constI32(nb, loc, tile);
            Value up = arith::AddIOp::create(nb, loc, a[0], constI32(nb, loc, tile - 1));
            padded = arith::MulIOp::create(nb, loc, arith::DivUIOp::create(nb, loc, up, t), t);
          }
          return addIf(nb, loc, before, padded, a[1]);
        });
  }

  /// A dynamic token count must fit the masked layout's capacity.
  static LogicalResult checkCapacity(DispatchOp op, ImplicitLocOpBuilder &b,
                                     int64_t capacity) {
    Value x = op.getX();
    if (ShapedType::isDynamic(op.getX().getType().getDimSize(0))) {
      Value fits = arith::CmpIOp::create(
          b, arith::CmpIPredicate::ule, tensor::DimOp::create(b, x, 0),
          arith::ConstantIndexOp::create(b, capacity));
      cf::AssertOp::create(b, fits,
                           "moe.dispatch: more tokens than the decode layout's "
                           "capacity of " + std::to_string(capacity) + " per expert");
    }
    return success();
  }

  static Value castTo(ImplicitLocOpBuilder &b, Value v, Value like) {
    if (v.getType() == like.getType())
      return v;
    return tensor::CastOp::create(b, like.getType(), v);
  }
};

//===----------------------------------------------------------------------===//
// moe.grouped_matmul, moe.activation, moe.combine
//===----------------------------------------------------------------------===//

struct GroupedMatmulLowering : OpRewritePattern<GroupedMatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(GroupedMatmulOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    OpFoldResult rows = tensor::getMixedSize(b, b.getLoc(), op.getInput(), 0);
    OpFoldResult cols = tensor::getMixedSize(b, b.getLoc(), op.getWeight(), 1);
    Value weight = op.getWeight();
    int64_t experts = op.getWeight().getType().getDimSize(0);
    // FP8 codes: element k of row r is e4m3(code) * scales[r, k / group].
    Value scales = op.getScales();
    int64_t group = scales ? op.getInput().getType().getDimSize(1) /
                                 op.getScales().getType().getDimSize(1)
                           : 0;
    auto element = [scales, group](OpBuilder &nb, Location loc, ValueRange idx,
                                   Value in) -> Value {
      if (!scales)
        return toF32(nb, loc, in);
      Value g = arith::DivUIOp::create(nb, loc, idx[2],
                                       arith::ConstantIndexOp::create(nb, loc, group));
      Value scale = tensor::ExtractOp::create(nb, loc, scales, ValueRange{idx[0], g});
      return arith::MulFOp::create(nb, loc, decodeE4M3(nb, loc, in), scale);
    };
    // FP8 weights: element [e, m, k] is e4m3(code) * wscales[e, m / bm, k / bk].
    Value wscales = op.getWeightScales();
    SmallVector<int64_t, 2> block(op.getWeightBlock().value_or(ArrayRef<int64_t>{}));
    auto weightElement = [wscales, block](OpBuilder &nb, Location loc, Value e,
                                          ValueRange idx, Value code) -> Value {
      if (!wscales)
        return toF32(nb, loc, code);
      Value bm = arith::ConstantIndexOp::create(nb, loc, block[0]);
      Value bk = arith::ConstantIndexOp::create(nb, loc, block[1]);
      Value row = arith::DivUIOp::create(nb, loc, idx[1], bm);
      Value col = arith::DivUIOp::create(nb, loc, idx[2], bk);
      Value scale = tensor::ExtractOp::create(nb, loc, wscales, ValueRange{e, row, col});
      return arith::MulFOp::create(nb, loc, decodeE4M3(nb, loc, code), scale);
    };
    // out[r,m] = sum_k in[r,k] * weight[row_expert[r], m, k]; rows of no
    // local expert (row_expert outside [0, E)) stay 0.
    Value acc = buildGeneric(
        b, {op.getInput(), op.getRowExpert()},
        buildFilled(b, {rows, cols}, b.getF32FloatAttr(0)),
        {Dims{0, 2}, Dims{0}, Dims{0, 1}}, 3, {2},
        [weight, experts, element, weightElement](OpBuilder &nb, Location loc,
                                                  ValueRange idx, ValueRange a) -> Value {
          Value local = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::ult,
                                              a[1], constI32(nb, loc, experts));
          Value expert = arith::SelectOp::create(nb, loc, local, a[1],
                                                 constI32(nb, loc, 0));
          Value e = i32ToIndex(nb, loc, expert);
          Value w = tensor::ExtractOp::create(nb, loc, weight, ValueRange{e, idx[1], idx[2]});
          Value lhs = element(nb, loc, idx, a[0]);
          Value rhs = weightElement(nb, loc, e, idx, w);
          Value p = arith::MulFOp::create(nb, loc, lhs, rhs);
          return addIf(nb, loc, local, p, a[2]);
        });
    Value result = castElements(b, acc, op.getType().getElementType());
    if (result.getType() != op.getType())
      result = tensor::CastOp::create(b, op.getType(), result);
    rewriter.replaceOp(op, result);
    return success();
  }
};

struct ActivationLowering : OpRewritePattern<ActivationOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ActivationOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    Value input = op.getInput();
    OpFoldResult rows = tensor::getMixedSize(b, b.getLoc(), input, 0);
    int64_t half = op.getInput().getType().getDimSize(1) / 2;
    // Gate and up are read with tensor.extract at (r, c) and (r, c + I):
    // no slices, so a static 0-row input needs no slice offset
    // (tensor.extract_slice rejects offset 0 of an empty dimension).
    Type elem = op.getType().getElementType();
    std::optional<float> alpha, limit;
    if (op.getKind() == Activation::clamped_swiglu) {
      alpha = op.getSwigluAlpha()->convertToFloat();
      limit = op.getSwigluLimit()->convertToFloat();
    }
    // In f32. SwiGLU: silu(gate) * up. clamped_swiglu (gpt-oss):
    // g * sigmoid(alpha * g) * (clamp(up, -limit, limit) + 1), g = min(gate, limit).
    Value result = buildGeneric(
        b, ValueRange{}, buildEmpty(b, {rows, b.getIndexAttr(half)}, elem),
        {Dims{0, 1}}, 2, {},
        [input, half, elem, alpha, limit](OpBuilder &nb, Location loc, ValueRange idx,
                                          ValueRange) -> Value {
          Value upCol = arith::AddIOp::create(
              nb, loc, idx[1], arith::ConstantIndexOp::create(nb, loc, half));
          Value gate = toF32(nb, loc, tensor::ExtractOp::create(
                                          nb, loc, input, ValueRange{idx[0], idx[1]}));
          Value up = toF32(nb, loc, tensor::ExtractOp::create(
                                        nb, loc, input, ValueRange{idx[0], upCol}));
          Value v;
          if (!alpha) {
            Value silu = arith::MulFOp::create(nb, loc, gate, sigmoid(nb, loc, gate, true));
            v = arith::MulFOp::create(nb, loc, silu, up);
          } else {
            auto constant = [&](float c) -> Value {
              return arith::ConstantOp::create(nb, loc, nb.getF32FloatAttr(c));
            };
            Value hi = constant(*limit), lo = constant(-*limit);
            gate = arith::MinimumFOp::create(nb, loc, gate, hi);
            Value upBelowHi = arith::MinimumFOp::create(nb, loc, up, hi);
            up = arith::MaximumFOp::create(nb, loc, upBelowHi, lo);
            Value scaled = arith::MulFOp::create(nb, loc, gate, constant(*alpha));
            Value glu = arith::MulFOp::create(nb, loc, gate, sigmoid(nb, loc, scaled, true));
            v = arith::MulFOp::create(nb, loc, glu,
                                      arith::AddFOp::create(nb, loc, up, constant(1.0f)));
          }
          return elem.isF32() ? v : arith::TruncFOp::create(nb, loc, elem, v);
        });
    if (result.getType() != op.getType())
      result = tensor::CastOp::create(b, op.getType(), result);
    rewriter.replaceOp(op, result);
    return success();
  }
};

struct CombineLowering : OpRewritePattern<CombineOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(CombineOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    OpFoldResult tokens = tensor::getMixedSize(b, b.getLoc(), op.getSlot(), 0);
    OpFoldResult hidden = tensor::getMixedSize(b, b.getLoc(), op.getExpertOut(), 1);
    Value expertOut = op.getExpertOut();
    // y[t,h] = sum_j weights[t,j] * expert_out[slot[t,j], h], loops (t, j, h):
    // the innermost loop walks one row of expert_out and of y, which LLVM
    // vectorizes; the sum still adds the choices in order j = 0, 1, ...
    Value acc = buildGeneric(
        b, {op.getSlot(), op.getWeights()},
        buildFilled(b, {tokens, hidden}, b.getF32FloatAttr(0)),
        {Dims{0, 1}, Dims{0, 1}, Dims{0, 2}}, 3, {1},
        [expertOut](OpBuilder &nb, Location loc, ValueRange idx, ValueRange a) -> Value {
          // A negative slot (masked layout) adds nothing; read row 0 instead.
          Value none = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::slt,
                                             a[0], constI32(nb, loc, 0));
          Value slot = arith::SelectOp::create(nb, loc, none, constI32(nb, loc, 0), a[0]);
          Value row = tensor::ExtractOp::create(
              nb, loc, expertOut, ValueRange{i32ToIndex(nb, loc, slot), idx[2]});
          Value p = arith::MulFOp::create(nb, loc, a[1], toF32(nb, loc, row));
          Value sum = arith::AddFOp::create(nb, loc, a[2], p);
          return arith::SelectOp::create(nb, loc, none, a[2], sum);
        });
    Value result = castElements(b, acc, op.getType().getElementType());
    if (result.getType() != op.getType())
      result = tensor::CastOp::create(b, op.getType(), result);
    rewriter.replaceOp(op, result);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// moe.chunk_loop -> scf.for over slices of x
//===----------------------------------------------------------------------===//

struct ChunkLoopLowering : OpRewritePattern<ChunkLoopOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ChunkLoopOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    Value x = op.getX();
    Value tokens = tensor::DimOp::create(b, x, 0);
    OpFoldResult hidden = tensor::getMixedSize(b, b.getLoc(), x, 1);
    Value chunk = arith::ConstantIndexOp::create(b, op.getChunkSize());
    Value zero = arith::ConstantIndexOp::create(b, 0);
    Value one = arith::ConstantIndexOp::create(b, 1);
    Value count = arith::CeilDivUIOp::create(b, tokens, chunk);
    if (op.getAgreed())
      count = AgreeCountOp::create(b, b.getIndexType(), count);
    Value init = tensor::EmptyOp::create(
        b, SmallVector<OpFoldResult>{tokens, hidden},
        op.getX().getType().getElementType());
    Block &body = op.getBody().front();
    auto loop = scf::ForOp::create(
        b, zero, count, one, ValueRange{init},
        [&](OpBuilder &nb, Location loc, Value i, ValueRange acc) {
          ImplicitLocOpBuilder lb(loc, nb);
          // Chunks past this rank's tokens are empty: start = min(i*C, T).
          Value start = arith::MinUIOp::create(
              lb, arith::MulIOp::create(lb, i, chunk), tokens);
          Value size = arith::MinUIOp::create(
              lb, chunk, arith::SubIOp::create(lb, tokens, start));
          SmallVector<OpFoldResult> offsets = {start, lb.getIndexAttr(0)};
          SmallVector<OpFoldResult> sizes = {size, hidden};
          SmallVector<OpFoldResult> strides = {lb.getIndexAttr(1), lb.getIndexAttr(1)};
          Value slice = tensor::ExtractSliceOp::create(
              lb, cast<RankedTensorType>(body.getArgument(0).getType()), x,
              offsets, sizes, strides);
          IRMapping map;
          map.map(body.getArgument(0), slice);
          for (Operation &inner : body.without_terminator())
            lb.clone(inner, map);
          Value rows = map.lookup(cast<YieldOp>(body.getTerminator()).getValue());
          Value updated = tensor::InsertSliceOp::create(lb, rows, acc[0], offsets,
                                                        sizes, strides);
          scf::YieldOp::create(lb, updated);
        });
    Value result = loop.getResult(0);
    if (result.getType() != op.getType())
      result = tensor::CastOp::create(b, op.getType(), result);
    rewriter.replaceOp(op, result);
    return success();
  }
};

struct ConvertMoEToLinalgPass
    : moe::impl::ConvertMoEToLinalgBase<ConvertMoEToLinalgPass> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    ConversionTarget target(*ctx);
    target.addIllegalOp<LayerOp, RouteOp, DispatchOp, GroupedMatmulOp, ActivationOp,
                        CombineOp, ChunkLoopOp>();
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    // moe.layer has no lowering here: moe-decompose-layer splits it first.
    WalkResult layers = getOperation()->walk([](LayerOp layer) {
      layer.emitError("convert-moe-to-linalg: run moe-decompose-layer first "
                      "(moe.layer lowers through its steps)");
      return WalkResult::interrupt();
    });
    if (layers.wasInterrupted())
      return signalPassFailure();
    RewritePatternSet patterns(ctx);
    patterns.add<RouteLowering, DispatchLowering, GroupedMatmulLowering,
                 ActivationLowering, CombineLowering, ChunkLoopLowering>(ctx);
    if (failed(applyPartialConversion(getOperation(), target,
                                      std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
