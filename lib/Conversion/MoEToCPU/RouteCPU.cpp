//===- RouteCPU.cpp - moe.route as a GEMM plus top-k by selection ---------===//
//
// `moe.route` on the CPU in O(T·E·k) instead of the O(T·E²) ranks of
// convert-moe-to-linalg, with the same results:
//
//   1. logits[T,E] = x · router_weight^T as a one-expert grouped GEMM
//      (`buildGroupedGemm`, threaded and vectorized);
//   2. per token, in an `scf.forall` over tokens, on f32 scalars: the logit
//      bias (gpt-oss) and bf16 rounding where asked; the scores
//      (softmax with the row maximum subtracted first, or sigmoid) written
//      over the logits; the selection scores (plus the correction bias); with
//      n_group > 1 the experts of all but the topk_group best groups set to
//      -inf; then top-k by selection: the j-th choice is the best expert that
//      the (j-1)-th choice beats. The weights are the scores of the chosen
//      experts, normalized and scaled.
//
// Every comparison is `beats`, the strict total order of convert-moe-to-linalg
// (a higher score first, equal scores by the lower index, NaN below every
// number including -inf, NaNs among themselves by index), so picking the best
// remaining entry j times gives exactly the entries whose rank is j there:
// the expert ids are identical for the same logits. The arithmetic follows
// RouteLowering operation by operation (the same formulas in the same order),
// so the weights are those of the linalg lowering up to the logits, whose
// sums the GEMM forms in another order (f32 rounding).
//
//===----------------------------------------------------------------------===//
#include "CPUPatterns.h"
#include "../MoEToLinalg/LinalgBuilders.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <limits>

using namespace mlir;
using namespace mlir::moe;
using mlir::moe::lowering::beats;

namespace {

Value constF32(OpBuilder &b, Location loc, double v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}

/// A plain loop `for i in [lb, ub)` whose body yields nothing.
void forLoop(OpBuilder &b, Location loc, Value lb, Value ub,
             function_ref<void(OpBuilder &, Location, Value)> body) {
  Value one = cpu::constIndex(b, loc, 1);
  scf::ForOp::create(b, loc, lb, ub, one, ValueRange{},
                     [&](OpBuilder &nb, Location l, Value i, ValueRange) {
                       body(nb, l, i);
                       scf::YieldOp::create(nb, l);
                     });
}

/// A loop `for i in [lb, ub)` carrying `init`; `body` returns the next values.
ValueRange foldLoop(
    OpBuilder &b, Location loc, Value lb, Value ub, ValueRange init,
    function_ref<SmallVector<Value>(OpBuilder &, Location, Value, ValueRange)>
        body) {
  Value one = cpu::constIndex(b, loc, 1);
  auto loop = scf::ForOp::create(
      b, loc, lb, ub, one, init,
      [&](OpBuilder &nb, Location l, Value i, ValueRange carried) {
        SmallVector<Value> next = body(nb, l, i, carried);
        scf::YieldOp::create(nb, l, next);
      });
  return loop.getResults();
}

/// lowering::bestBelow over `buffer[token, begin..end)`.
std::pair<Value, Value>
bestBelow(OpBuilder &b, Location loc, Value buffer, Value token, Value begin,
          Value end, Value firstPick, Value prevValue, Value prevIndex) {
  return lowering::bestBelow(
      b, loc, begin, end, firstPick, prevValue, prevIndex,
      [&](OpBuilder &nb, Location l, Value e) -> Value {
        return memref::LoadOp::create(nb, l, buffer, ValueRange{token, e});
      });
}

struct RouteCpuLowering : OpRewritePattern<RouteOp> {
  RouteCpuLowering(MLIRContext *context, const cpu::CpuCodegenOptions &options)
      : OpRewritePattern(context), options(options) {}

  LogicalResult matchAndRewrite(RouteOp op,
                                PatternRewriter &rewriter) const override {
    OpBuilder &b = rewriter;
    Location loc = op.getLoc();
    RoutingAttr routing = op.getRouting();
    RankedTensorType xType = op.getX().getType();
    RankedTensorType wType = op.getRouterWeight().getType();
    int64_t experts = wType.getDimSize(0);
    if (ShapedType::isDynamic(experts))
      return rewriter.notifyMatchFailure(op, "dynamic number of experts");
    int64_t topK = routing.getTopK();
    int64_t groups = routing.getNGroup();
    int64_t keepGroups = routing.getTopkGroup();
    bool groupLimited = groups > 1;
    int64_t perGroup = experts / groups;
    Type f32 = b.getF32Type(), i32 = b.getI32Type();

    // Token count: static when x says so.
    int64_t staticTokens = xType.getDimSize(0);
    Value tokens = ShapedType::isDynamic(staticTokens)
                       ? tensor::DimOp::create(b, loc, op.getX(), 0).getResult()
                       : cpu::constIndex(b, loc, staticTokens);
    SmallVector<Value> dynTokens;
    if (ShapedType::isDynamic(staticTokens))
      dynTokens.push_back(tokens);
    auto rowsOf = [&](int64_t n, Type elem) {
      return RankedTensorType::get({staticTokens, n}, elem);
    };

    // 1. logits[T,E] = x · w^T: one expert owning rows [0, T).
    Value x = cpu::readBuffer(b, loc, op.getX());
    Value w = cpu::readBuffer(b, loc, op.getRouterWeight());
    OpFoldResult hidden = memref::getMixedSize(b, loc, w, 1);
    Value w3 = memref::ExpandShapeOp::create(
        b, loc, ArrayRef<int64_t>{1, experts, wType.getDimSize(1)}, w,
        ArrayRef<ReassociationIndices>{{0, 1}, {2}},
        ArrayRef<OpFoldResult>{b.getIndexAttr(1), b.getIndexAttr(experts),
                               hidden});
    auto oneIndex = RankedTensorType::get({1}, b.getIndexType());
    Value zero = cpu::constIndex(b, loc, 0);
    Value rowBegin = cpu::allocBuffer(b, loc, oneIndex, {});
    Value rowEnd = cpu::allocBuffer(b, loc, oneIndex, {});
    memref::StoreOp::create(b, loc, zero, rowBegin, ValueRange{zero});
    memref::StoreOp::create(b, loc, tokens, rowEnd, ValueRange{zero});
    // The scores are written over the logits, token by token.
    Value scores = cpu::allocBuffer(b, loc, rowsOf(experts, f32), dynTokens);
    cpu::GemmBuffers gemm;
    gemm.a = x;
    gemm.w = w3;
    gemm.out = scores;
    gemm.rowBegin = rowBegin;
    gemm.rowEnd = rowEnd;
    cpu::buildGroupedGemm(b, loc, gemm, options);

    // Per-token buffers, allocated once for all tokens (each thread owns its
    // token's row).
    Value bias = op.getCorrectionBias()
                     ? cpu::readBuffer(b, loc, op.getCorrectionBias())
                     : Value();
    Value logitBias =
        op.getLogitBias() ? cpu::readBuffer(b, loc, op.getLogitBias()) : Value();
    Value selection = scores;
    if (bias || groupLimited)
      selection = cpu::allocBuffer(b, loc, rowsOf(experts, f32), dynTokens);
    Value groupScores = groupLimited ? cpu::allocBuffer(b, loc, rowsOf(groups, f32),
                                                        dynTokens)
                                     : Value();
    RankedTensorType idsType = rowsOf(topK, i32);
    RankedTensorType weightsType = rowsOf(topK, f32);
    Value ids = cpu::allocBuffer(b, loc, idsType, dynTokens);
    Value weights = cpu::allocBuffer(b, loc, weightsType, dynTokens);

    // 2. Per token, on threads.
    auto forall = scf::ForallOp::create(
        b, loc, ArrayRef<OpFoldResult>{OpFoldResult(tokens)}, ValueRange{},
        std::nullopt);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(forall.getBody()->getTerminator());
      Value t = forall.getInductionVars()[0];
      Value numExperts = cpu::constIndex(b, loc, experts);
      Value yes = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
      Value no = arith::ConstantOp::create(b, loc, b.getBoolAttr(false));
      Value fzero = constF32(b, loc, 0.0);
      Value fone = constF32(b, loc, 1.0);
      Value ninf = constF32(b, loc, -std::numeric_limits<float>::infinity());
      auto load = [&](OpBuilder &nb, Location l, Value buffer, ValueRange idx) {
        return memref::LoadOp::create(nb, l, buffer, idx).getResult();
      };
      auto store = [&](OpBuilder &nb, Location l, Value v, Value buffer,
                       ValueRange idx) {
        memref::StoreOp::create(nb, l, v, buffer, idx);
      };

      // gpt-oss's logit bias, then a bf16 model's rounding of the logits
      // (logits_bf16).
      if (logitBias || routing.getLogitsBf16())
        forLoop(b, loc, zero, numExperts, [&](OpBuilder &nb, Location l, Value e) {
          Value v = load(nb, l, scores, {t, e});
          if (logitBias)
            v = arith::AddFOp::create(nb, l, v, load(nb, l, logitBias, {e}));
          if (routing.getLogitsBf16()) {
            Value rounded = arith::TruncFOp::create(nb, l, nb.getBF16Type(), v);
            v = arith::ExtFOp::create(nb, l, nb.getF32Type(), rounded);
          }
          store(nb, l, v, scores, {t, e});
        });
      // Scores, over the logits.
      if (routing.getScore() == ScoreFunction::softmax) {
        // max, then exp(l - max) and their sum, then exp / sum (RouteLowering's
        // buildSoftmax: the same operations in the same order).
        Value rowMax = foldLoop(
            b, loc, zero, numExperts, ValueRange{ninf},
            [&](OpBuilder &nb, Location l, Value e, ValueRange acc) {
              Value v = load(nb, l, scores, {t, e});
              return SmallVector<Value>{
                  arith::MaximumFOp::create(nb, l, v, acc[0])};
            })[0];
        Value rowSum = foldLoop(
            b, loc, zero, numExperts, ValueRange{fzero},
            [&](OpBuilder &nb, Location l, Value e, ValueRange acc) {
              Value v = load(nb, l, scores, {t, e});
              Value shifted = arith::SubFOp::create(nb, l, v, rowMax);
              Value ex = math::ExpOp::create(nb, l, shifted);
              store(nb, l, ex, scores, {t, e});
              return SmallVector<Value>{arith::AddFOp::create(nb, l, ex, acc[0])};
            })[0];
        forLoop(b, loc, zero, numExperts, [&](OpBuilder &nb, Location l, Value e) {
          Value ex = load(nb, l, scores, {t, e});
          store(nb, l, arith::DivFOp::create(nb, l, ex, rowSum), scores, {t, e});
        });
      } else {
        forLoop(b, loc, zero, numExperts, [&](OpBuilder &nb, Location l, Value e) {
          Value v = load(nb, l, scores, {t, e});
          Value neg = arith::NegFOp::create(nb, l, v);
          Value ex = math::ExpOp::create(nb, l, neg);
          Value den = arith::AddFOp::create(nb, l, fone, ex);
          store(nb, l, arith::DivFOp::create(nb, l, fone, den), scores, {t, e});
        });
      }

      // Selection scores.
      if (selection != scores)
        forLoop(b, loc, zero, numExperts, [&](OpBuilder &nb, Location l, Value e) {
          Value s = load(nb, l, scores, {t, e});
          if (bias) {
            Value c = load(nb, l, bias, {e});
            s = arith::AddFOp::create(nb, l, s, c);
          }
          store(nb, l, s, selection, {t, e});
        });

      // Group-limited routing: a group's score is the sum of its two best
      // selection scores (its best with group_max); the experts of groups
      // ranked below the topk_group-th best group get -inf.
      if (groupLimited && keepGroups < groups) {
        Value size = cpu::constIndex(b, loc, perGroup);
        Value numGroups = cpu::constIndex(b, loc, groups);
        forLoop(b, loc, zero, numGroups, [&](OpBuilder &nb, Location l, Value g) {
          Value begin = arith::MulIOp::create(nb, l, g, size);
          Value end = arith::AddIOp::create(nb, l, begin, size);
          auto [v1, i1] = bestBelow(nb, l, selection, t, begin, end, yes, fzero,
                                    zero);
          if (routing.getGroupMax()) {
            store(nb, l, arith::AddFOp::create(nb, l, fzero, v1), groupScores, {t, g});
            return;
          }
          auto [v2, i2] = bestBelow(nb, l, selection, t, begin, end, no, v1, i1);
          // RouteLowering adds them in index order to 0: (0 + a) + b.
          Value firstLower = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ult,
                                                   i1, i2);
          Value a = arith::SelectOp::create(nb, l, firstLower, v1, v2);
          Value c = arith::SelectOp::create(nb, l, firstLower, v2, v1);
          Value sum = arith::AddFOp::create(nb, l, fzero, a);
          sum = arith::AddFOp::create(nb, l, sum, c);
          store(nb, l, sum, groupScores, {t, g});
        });
        // The topk_group-th best group: the best group that the previous pick
        // beats, topk_group times.
        ValueRange last = foldLoop(
            b, loc, zero, cpu::constIndex(b, loc, keepGroups),
            ValueRange{fzero, zero},
            [&](OpBuilder &nb, Location l, Value j, ValueRange prev) {
              Value first = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                                  j, zero);
              auto [v, i] = bestBelow(nb, l, groupScores, t, zero, numGroups,
                                      first, prev[0], prev[1]);
              return SmallVector<Value>{v, i};
            });
        Value lastScore = last[0], lastGroup = last[1];
        // A group is dropped when the last kept group beats it.
        forLoop(b, loc, zero, numGroups, [&](OpBuilder &nb, Location l, Value g) {
          Value gs = load(nb, l, groupScores, {t, g});
          Value dropped = beats(nb, l, lastScore, gs, lastGroup, g);
          scf::IfOp::create(nb, l, dropped, [&](OpBuilder &ib, Location il) {
            Value begin = arith::MulIOp::create(ib, il, g, size);
            Value end = arith::AddIOp::create(ib, il, begin, size);
            forLoop(ib, il, begin, end, [&](OpBuilder &fb, Location fl, Value e) {
              store(fb, fl, ninf, selection, {t, e});
            });
            scf::YieldOp::create(ib, il);
          });
        });
      }

      // Top-k by selection; the weights are the chosen experts' scores, summed
      // in choice order for the normalization.
      Value weightSum = foldLoop(
          b, loc, zero, cpu::constIndex(b, loc, topK),
          ValueRange{fzero, zero, fzero},
          [&](OpBuilder &nb, Location l, Value j, ValueRange acc) {
            Value first = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                                j, zero);
            auto [v, e] = bestBelow(nb, l, selection, t, zero, numExperts, first,
                                    acc[0], acc[1]);
            Value id = arith::IndexCastOp::create(nb, l, i32, e);
            store(nb, l, id, ids, {t, j});
            Value weight = load(nb, l, scores, {t, e});
            store(nb, l, weight, weights, {t, j});
            Value sum = arith::AddFOp::create(nb, l, weight, acc[2]);
            return SmallVector<Value>{v, e, sum};
          })[2];

      // normalizeAndScale: w / denominator * scale.
      double scale = routing.getScale().convertToDouble();
      if (routing.getNormalize() || scale != 1.0) {
        Value denominator = routing.getNormalize() ? weightSum : fone;
        Value factor = constF32(b, loc, scale);
        forLoop(b, loc, zero, cpu::constIndex(b, loc, topK),
                [&](OpBuilder &nb, Location l, Value j) {
                  Value wj = load(nb, l, weights, {t, j});
                  Value q = arith::DivFOp::create(nb, l, wj, denominator);
                  store(nb, l, arith::MulFOp::create(nb, l, q, factor), weights,
                        {t, j});
                });
      }
    }

    // 3. Back to tensors, cast to the op's result types (the op may state a
    // static token count that the lowering sees as dynamic).
    auto castTo = [&](Value v, Type type) -> Value {
      return v.getType() == type
                 ? v
                 : tensor::CastOp::create(b, loc, type, v).getResult();
    };
    Value idsTensor = cpu::toTensor(b, loc, ids, idsType);
    Value weightsTensor = cpu::toTensor(b, loc, weights, weightsType);
    rewriter.replaceOp(op, {castTo(idsTensor, op.getExpertIds().getType()),
                            castTo(weightsTensor, op.getExpertWeights().getType())});
    return success();
  }

private:
  cpu::CpuCodegenOptions options;
};

} // namespace

void cpu::populateCpuRoutePatterns(RewritePatternSet &patterns,
                                   const CpuCodegenOptions &options) {
  patterns.add<RouteCpuLowering>(patterns.getContext(), options);
}
