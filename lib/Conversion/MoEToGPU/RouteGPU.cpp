//===- RouteGPU.cpp - moe.route as a tensor-core GEMM and one kernel ------===//
//
// A bf16 `moe.route` on the GPU in two kernels instead of the dozen that
// convert-moe-to-linalg's ranks make:
//
//   1. logits[T, E] (f32) = x · router_weight^T on tensor cores (the dense
//      form of the grouped GEMM kernels, GemmKernel.h);
//   2. a warp per token, lane l holding experts l, l + 32, ... in
//      registers: the logit bias and bf16 rounding where asked, the scores
//      (softmax: the row's max and sum meet across the warp; or sigmoid),
//      the selection scores (plus the correction bias); with n_group > 1
//      each group's two best (its best with group_max) meet across the
//      warp, and each expert whose group ranks at topk_group or below gets
//      -inf; then k rounds, each picking the warp's best expert below the
//      previous choice. Lane r keeps choice r; the sum of the chosen scores
//      runs in choice order.
//
// Ranks use `beats`, the strict total order both other lowerings use, and
// the arithmetic follows RouteCPU.cpp but for the softmax sum (a tree
// across the lanes instead of expert order), so the expert ids are those
// of the CPU for the same logits up to that sum's last bit. Every merge
// across lanes is symmetric, so all lanes end with the same values.
//
//===----------------------------------------------------------------------===//
#include "GPUKernels.h"
#include "KernelBuilder.h"
#include "../MoEToLinalg/LinalgBuilders.h"
#include "moe/Conversion/ReadBuffer.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <limits>

using namespace mlir;
using namespace mlir::moe;
using mlir::moe::lowering::beats;

namespace {
constexpr int64_t kWarp = 32;
/// Tokens a block routes, a warp each.
constexpr int64_t kTokensPerBlock = 4;

/// Builds one warp's routing of token `t`; `b` is inside the launch. Lane
/// `lane` holds experts lane, lane + 32, ... (row j of the warp's experts is
/// [32 j, 32 j + 32)) in registers; the lanes meet through xor shuffles
/// whose merges are symmetric, so every lane ends with the same values.
struct WarpRoute : KernelBuilder {
  RoutingAttr routing;
  int64_t experts;
  Value lane;

  int64_t rowsOfExperts() const { return experts / kWarp; }

  Value shuffleXor(Value v, int64_t offset) {
    Value distance = i32(offset), width = i32(kWarp);
    return gpu::ShuffleOp::create(b, loc, v, distance, width, gpu::ShuffleMode::XOR)
        .getShuffleResult();
  }

  /// Every lane's `mine` merged with the others', in five xor steps.
  SmallVector<Value> acrossWarp(SmallVector<Value> mine,
                                function_ref<SmallVector<Value>(ValueRange, ValueRange)> merge) {
    for (int64_t offset = kWarp / 2; offset >= 1; offset /= 2) {
      SmallVector<Value> other;
      for (Value v : mine)
        other.push_back(shuffleXor(v, offset));
      mine = merge(mine, other);
    }
    return mine;
  }

  Value select(Value cond, Value x, Value y) { return arith::SelectOp::create(b, loc, cond, x, y); }
  Value addf(Value x, Value y) { return arith::AddFOp::create(b, loc, x, y); }
  Value nan() { return f32(std::numeric_limits<float>::quiet_NaN()); }

  /// The routing order on values alone (ties are equal, NaN lowest): the
  /// group scores only need the two best values, not which experts.
  Value above(Value x, Value y) {
    Value greater = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, x, y);
    Value xNumber = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::ORD, x, x);
    Value yNaN = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, y, y);
    return arith::OrIOp::create(b, loc, greater, arith::AndIOp::create(b, loc, xNumber, yNaN));
  }
  Value higher(Value x, Value y) { return select(above(y, x), y, x); }

  /// The group's two best selection scores (best first; NaN stands for none).
  SmallVector<Value> groupBestTwo(ArrayRef<Value> selection, ArrayRef<Value> expertIds,
                                  int64_t group, int64_t perGroup) {
    Value best = nan(), second = nan();
    for (int64_t j = 0; j < rowsOfExperts(); ++j) {
      int64_t rowBegin = j * kWarp, rowEnd = rowBegin + kWarp;
      int64_t groupBegin = group * perGroup, groupEnd = groupBegin + perGroup;
      if (rowEnd <= groupBegin || groupEnd <= rowBegin)
        continue;
      Value v = selection[j];
      if (rowBegin < groupBegin || groupEnd < rowEnd) {
        Value fromBegin = cmp(arith::CmpIPredicate::sge, expertIds[j], i32(groupBegin));
        Value beforeEnd = cmp(arith::CmpIPredicate::slt, expertIds[j], i32(groupEnd));
        Value inGroup = arith::AndIOp::create(b, loc, fromBegin, beforeEnd);
        Value none = nan();
        v = select(inGroup, v, none);
      }
      Value takesFirst = above(v, best);
      Value runnerUp = higher(second, v);
      second = select(takesFirst, best, runnerUp);
      best = select(takesFirst, v, best);
    }
    return acrossWarp({best, second}, [&](ValueRange m, ValueRange o) -> SmallVector<Value> {
      Value mineFirst = above(m[0], o[0]);
      Value best = select(mineFirst, m[0], o[0]);
      Value secondIfMine = higher(m[1], o[0]);
      Value secondIfTheirs = higher(m[0], o[1]);
      return {best, select(mineFirst, secondIfMine, secondIfTheirs)};
    });
  }

  /// Sets the selection scores of experts whose group ranks at topk_group
  /// or below to -inf.
  void dropGroups(MutableArrayRef<Value> selection, ArrayRef<Value> expertIds) {
    int64_t groups = routing.getNGroup(), perGroup = experts / groups;
    SmallVector<Value> groupScores;
    Value fzero = f32(0.0);
    for (int64_t g = 0; g < groups; ++g) {
      SmallVector<Value> two = groupBestTwo(selection, expertIds, g, perGroup);
      // 0 + best (+ second): the sum of the CPU's (0 + lower index) + higher.
      Value score = addf(fzero, two[0]);
      if (!routing.getGroupMax())
        score = addf(score, two[1]);
      groupScores.push_back(score);
    }
    SmallVector<Value> kept;
    for (int64_t g = 0; g < groups; ++g) {
      Value rank = i32(0);
      for (int64_t h = 0; h < groups; ++h) {
        if (h == g)
          continue;
        Value other = i32(h), self = i32(g);
        Value ahead = beats(b, loc, groupScores[h], groupScores[g], other, self);
        rank = add(rank, arith::ExtUIOp::create(b, loc, b.getI32Type(), ahead));
      }
      kept.push_back(cmp(arith::CmpIPredicate::slt, rank, i32(routing.getTopkGroup())));
    }
    Value ninf = f32(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < rowsOfExperts(); ++j) {
      int64_t first = j * kWarp / perGroup, last = (j * kWarp + kWarp - 1) / perGroup;
      Value keep = kept[first];
      if (last != first) {
        Value group = arith::DivSIOp::create(b, loc, expertIds[j], i32(perGroup));
        for (int64_t g = first + 1; g <= last; ++g)
          keep = select(cmp(arith::CmpIPredicate::eq, group, i32(g)), kept[g], keep);
      }
      selection[j] = select(keep, selection[j], ninf);
    }
  }

  /// Logit `e` of token `t`: the sum of the GEMM's depth partials in order
  /// where its decode form split the depth (T <= denseDecodeMaxRows()).
  Value logitAt(Value t, Value e, Value logits, Value depthPartials, Value tokens) {
    if (!depthPartials)
      return load(logits, {t, e});
    int64_t splits = cast<MemRefType>(depthPartials.getType()).getDimSize(0);
    Value split = cmp(arith::CmpIPredicate::ule, tokens, idx(denseDecodeMaxRows()));
    auto choice = scf::IfOp::create(b, loc, b.getF32Type(), split, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(choice.thenBlock());
    Value sum = load(depthPartials, {idx(0), t, e});
    for (int64_t s = 1; s < splits; ++s)
      sum = addf(sum, load(depthPartials, {idx(s), t, e}));
    scf::YieldOp::create(b, loc, sum);
    b.setInsertionPointToStart(choice.elseBlock());
    scf::YieldOp::create(b, loc, load(logits, {t, e}));
    return choice.getResult(0);
  }

  /// Routes token `t` of `tokens`: ids[t, 0..k) and weights[t, 0..k), lane
  /// r writing choice r.
  void build(Value t, Value tokens, Value logits, Value depthPartials, Value logitBias, Value bias,
             Value ids, Value weights) {
    int64_t rows = rowsOfExperts();
    Value laneId = toI32(lane);
    SmallVector<Value> expertAt, expertIds;
    for (int64_t j = 0; j < rows; ++j) {
      expertAt.push_back(add(lane, idx(j * kWarp)));
      expertIds.push_back(add(laneId, i32(j * kWarp)));
    }
    // Logits, with gpt-oss's bias and a bf16 model's rounding.
    SmallVector<Value> raw;
    for (int64_t j = 0; j < rows; ++j) {
      Value v = logitAt(t, expertAt[j], logits, depthPartials, tokens);
      if (logitBias)
        v = addf(v, load(logitBias, {expertAt[j]}));
      if (routing.getLogitsBf16())
        v = arith::ExtFOp::create(b, loc, b.getF32Type(),
                                  arith::TruncFOp::create(b, loc, b.getBF16Type(), v).getResult());
      raw.push_back(v);
    }
    SmallVector<Value> scores;
    Value fone = f32(1.0);
    if (routing.getScore() == ScoreFunction::softmax) {
      Value rowMax = f32(-std::numeric_limits<float>::infinity());
      for (Value v : raw)
        rowMax = arith::MaximumFOp::create(b, loc, v, rowMax);
      rowMax = acrossWarp({rowMax}, [&](ValueRange m, ValueRange o) -> SmallVector<Value> {
        return {arith::MaximumFOp::create(b, loc, m[0], o[0])};
      })[0];
      SmallVector<Value> exps;
      Value rowSum = f32(0.0);
      for (Value v : raw) {
        exps.push_back(math::ExpOp::create(b, loc, arith::SubFOp::create(b, loc, v, rowMax)));
        rowSum = addf(exps.back(), rowSum);
      }
      rowSum = acrossWarp({rowSum}, [&](ValueRange m, ValueRange o) -> SmallVector<Value> {
        return {addf(m[0], o[0])};
      })[0];
      for (Value e : exps)
        scores.push_back(arith::DivFOp::create(b, loc, e, rowSum));
    } else {
      for (Value v : raw) {
        Value ex = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, v));
        scores.push_back(arith::DivFOp::create(b, loc, fone, addf(fone, ex)));
      }
    }
    SmallVector<Value> selection(scores);
    if (bias)
      for (int64_t j = 0; j < rows; ++j)
        selection[j] = addf(selection[j], load(bias, {expertAt[j]}));
    if (routing.getNGroup() > 1 && routing.getTopkGroup() < routing.getNGroup())
      dropGroups(selection, expertIds);

    // Choice r is the best expert that choice r - 1 beats: each lane's best
    // such, then the warp's. (NaN, E) loses to every expert.
    int64_t topK = routing.getTopK();
    Value fzero = f32(0.0);
    Value none = i32(experts);
    Value zero = idx(0), rounds = idx(topK), one = idx(1);
    SmallVector<Value> chosen =
        fold(zero, rounds, one, ValueRange{nan(), none, fzero, i32(0), fzero},
             [&](Value r, ValueRange acc) -> SmallVector<Value> {
               Value first = cmp(arith::CmpIPredicate::eq, r, zero);
               Value bestValue = nan(), bestId = none, bestScore = fzero;
               for (int64_t j = 0; j < rows; ++j) {
                 Value below = beats(b, loc, acc[0], selection[j], acc[1], expertIds[j]);
                 Value candidate = arith::OrIOp::create(b, loc, first, below);
                 Value better = beats(b, loc, selection[j], bestValue, expertIds[j], bestId);
                 Value take = arith::AndIOp::create(b, loc, candidate, better);
                 bestValue = select(take, selection[j], bestValue);
                 bestId = select(take, expertIds[j], bestId);
                 bestScore = select(take, scores[j], bestScore);
               }
               SmallVector<Value> winner =
                   acrossWarp({bestValue, bestId, bestScore},
                              [&](ValueRange m, ValueRange o) -> SmallVector<Value> {
                                Value theirs = beats(b, loc, o[0], m[0], o[1], m[1]);
                                return {select(theirs, o[0], m[0]), select(theirs, o[1], m[1]),
                                        select(theirs, o[2], m[2])};
                              });
               Value mine = cmp(arith::CmpIPredicate::eq, lane, r);
               return {winner[0], winner[1], addf(winner[2], acc[2]),
                       select(mine, winner[1], acc[3]), select(mine, winner[2], acc[4])};
             });
    Value sum = chosen[2];
    ifThen(cmp(arith::CmpIPredicate::ult, lane, idx(topK)), [&] {
      double scale = routing.getScale().convertToDouble();
      Value w = chosen[4];
      if (routing.getNormalize() || scale != 1.0) {
        Value denominator = routing.getNormalize() ? sum : fone;
        Value share = arith::DivFOp::create(b, loc, w, denominator);
        w = arith::MulFOp::create(b, loc, share, f32(scale));
      }
      store(chosen[3], ids, {t, lane});
      store(w, weights, {t, lane});
    });
  }
};

struct RouteToGPU : OpRewritePattern<RouteOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RouteOp op, PatternRewriter &rewriter) const override {
    RankedTensorType xType = op.getX().getType();
    RankedTensorType wType = op.getRouterWeight().getType();
    if (!xType.getElementType().isBF16() || !wType.getElementType().isBF16() ||
        !wType.hasStaticShape())
      return rewriter.notifyMatchFailure(op, "bf16 x and router weight, static weight");
    int64_t experts = wType.getDimSize(0), hidden = wType.getDimSize(1);
    if (experts > 1024 || !denseTensorCoreGemmApplies(experts, hidden))
      return rewriter.notifyMatchFailure(op, "E a multiple of 32 up to 1024, H of 32");
    auto f32Bias = [](Value bias) { return !bias || getElementTypeOrSelf(bias.getType()).isF32(); };
    if (!f32Bias(op.getLogitBias()) || !f32Bias(op.getCorrectionBias()))
      return rewriter.notifyMatchFailure(op, "f32 biases");
    RoutingAttr routing = op.getRouting();
    int64_t topK = routing.getTopK();
    if (topK > kWarp || routing.getNGroup() > kWarp)
      return rewriter.notifyMatchFailure(op, "top_k and n_group up to a warp's lanes");
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Value logitBias = op.getLogitBias() ? readBuffer(b, loc, op.getLogitBias()) : Value();
    Value bias = op.getCorrectionBias() ? readBuffer(b, loc, op.getCorrectionBias()) : Value();
    Value rows = tensor::DimOp::create(b, loc, op.getX(), 0);
    auto bufferOf = [&](int64_t cols, Type element) -> Value {
      auto type = MemRefType::get({xType.getDimSize(0), cols}, element);
      return memref::AllocOp::create(b, loc, type,
                                     type.isDynamicDim(0) ? ValueRange{rows} : ValueRange{});
    };
    Value logits = bufferOf(experts, b.getF32Type());
    Value depthPartials = buildDenseTensorCoreGemm(b, loc, readBuffer(b, loc, op.getX()),
                                                   readBuffer(b, loc, op.getRouterWeight()), logits,
                                                   rows, experts, hidden,
                                                   /*splitDepth=*/true);
    Value ids = bufferOf(topK, b.getI32Type());
    Value weights = bufferOf(topK, b.getF32Type());

    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    Value perBlock = arith::ConstantIndexOp::create(b, loc, kTokensPerBlock);
    Value blocks = arith::CeilDivUIOp::create(b, loc, rows, perBlock);
    auto launch = gpu::LaunchOp::create(
        b, loc, blocks, one, one, arith::ConstantIndexOp::create(b, loc, kWarp), perBlock, one);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&launch.getBody().front());
      WarpRoute kernel{{b, loc}, routing, experts, launch.getThreadIds().x};
      Value t = kernel.add(arith::MulIOp::create(b, loc, launch.getBlockIds().x, perBlock),
                           launch.getThreadIds().y);
      kernel.ifThen(kernel.cmp(arith::CmpIPredicate::ult, t, rows), [&] {
        kernel.build(t, rows, logits, depthPartials, logitBias, bias, ids, weights);
      });
      gpu::TerminatorOp::create(b, loc);
    }
    auto asTensor = [&](Value buffer, Type type) -> Value {
      auto memrefType = cast<MemRefType>(buffer.getType());
      Value t = bufferization::ToTensorOp::create(
          b, loc, RankedTensorType::get(memrefType.getShape(), memrefType.getElementType()),
          buffer, /*restrict=*/true, /*writable=*/true);
      return t.getType() == type ? t : tensor::CastOp::create(b, loc, type, t).getResult();
    };
    rewriter.replaceOp(op, {asTensor(ids, op.getExpertIds().getType()),
                            asTensor(weights, op.getExpertWeights().getType())});
    return success();
  }
};
} // namespace

void mlir::moe::populateRouteToGPUPatterns(RewritePatternSet &patterns) {
  patterns.add<RouteToGPU>(patterns.getContext());
}
