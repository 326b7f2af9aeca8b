//===- RouteGPU.cpp - moe.route as a tensor-core GEMM and one kernel ------===//
//
// A bf16 `moe.route` on the GPU in two kernels instead of the dozen that
// convert-moe-to-linalg's ranks make:
//
//   1. logits[T, E] (f32) = x · router_weight^T on tensor cores (the dense
//      form of the grouped GEMM kernels, GemmKernel.h);
//   2. one block per token, one thread per expert, in workgroup memory: the
//      logit bias and bf16 rounding where asked, the scores (softmax: every
//      thread sums the exponentials in expert order, so the sum is the same
//      everywhere; or sigmoid), the selection scores (plus the correction
//      bias); with n_group > 1 one thread per group scores its group (its
//      two best, or its best with group_max) and each expert whose group
//      ranks at topk_group or below gets -inf; then each expert's rank among
//      all, and the experts ranked below k write themselves to the choices.
//      One thread sums the chosen scores in choice order, normalizes and
//      scales.
//
// Ranks use `beats`, the strict total order both other lowerings use, and
// the arithmetic follows RouteCPU.cpp operation by operation, so the expert
// ids are those of the CPU for the same logits.
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
/// Builds the per-token kernel's body; `b` is inside the launch.
struct TokenKernel : KernelBuilder {
  RoutingAttr routing;
  int64_t experts;

  /// A loop over [lb, ub) carrying `init`; `body` returns the next values.
  SmallVector<Value> fold(Value lb, Value ub, ValueRange init,
                          function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    return KernelBuilder::fold(lb, ub, idx(1), init, body);
  }

  /// How many entries of `values[0, count)` beat entry `self` (its rank),
  /// four entries a step where the count allows (independent loads).
  Value rank(Value values, int64_t count, Value self) {
    Value mine = load(values, {self});
    Value zero = idx(0), one = idx(1);
    int64_t unroll = count % 4 == 0 ? 4 : 1;
    auto loop = scf::ForOp::create(b, loc, zero, idx(count), idx(unroll), ValueRange{zero},
                                   [&](OpBuilder &nb, Location, Value i, ValueRange acc) {
                                     OpBuilder::InsertionGuard guard(b);
                                     b.setInsertionPoint(nb.getInsertionBlock(),
                                                         nb.getInsertionPoint());
                                     Value sum = acc[0];
                                     for (int64_t j = 0; j < unroll; ++j) {
                                       Value at = arith::AddIOp::create(b, loc, i, idx(j));
                                       Value ahead = beats(b, loc, load(values, {at}), mine, at, self);
                                       sum = arith::AddIOp::create(
                                           b, loc, sum, arith::SelectOp::create(b, loc, ahead, one, zero));
                                     }
                                     scf::YieldOp::create(b, loc, sum);
                                   });
    return loop.getResult(0);
  }

  /// lowering::bestBelow over values[begin, end) (workgroup memory).
  std::pair<Value, Value> bestBelow(Value values, Value begin, Value end, Value firstPick,
                                    Value prevValue, Value prevIndex) {
    return lowering::bestBelow(b, loc, begin, end, firstPick, prevValue, prevIndex,
                               [&](OpBuilder &nb, Location l, Value e) -> Value {
                                 return memref::LoadOp::create(nb, l, values, ValueRange{e});
                               });
  }

  /// Thread `e` of token `t`'s block. `raw`, `scores`, `selection` (E),
  /// `groupScores` (n_group) and `chosen` (k) are workgroup memory.
  void build(Value t, Value e, Value logits, Value logitBias, Value bias, Value ids,
             Value weights, Value raw, Value scores, Value selection, Value groupScores,
             Value chosen) {
    Value numExperts = idx(experts);
    Value active = cmp(arith::CmpIPredicate::ult, e, numExperts);
    Value zero = idx(0);
    Value fzero = f32(0.0), fone = f32(1.0);
    Value ninf = f32(-std::numeric_limits<float>::infinity());
    // Logits, with gpt-oss's bias and a bf16 model's rounding.
    ifThen(active, [&] {
      Value v = load(logits, {t, e});
      if (logitBias)
        v = arith::AddFOp::create(b, loc, v, load(logitBias, {e}));
      if (routing.getLogitsBf16())
        v = arith::ExtFOp::create(b, loc, b.getF32Type(),
                                  arith::TruncFOp::create(b, loc, b.getBF16Type(), v).getResult());
      store(v, raw, {e});
    });
    gpu::BarrierOp::create(b, loc);
    if (routing.getScore() == ScoreFunction::softmax) {
      // Every thread folds the row in expert order: the same max and sum.
      Value rowMax = fold(zero, numExperts, ValueRange{ninf}, [&](Value i, ValueRange acc) {
        return SmallVector<Value>{arith::MaximumFOp::create(b, loc, load(raw, {i}), acc[0])};
      })[0];
      ifThen(active, [&] {
        Value shifted = arith::SubFOp::create(b, loc, load(raw, {e}), rowMax);
        store(math::ExpOp::create(b, loc, shifted), scores, {e});
      });
      gpu::BarrierOp::create(b, loc);
      Value rowSum = fold(zero, numExperts, ValueRange{fzero}, [&](Value i, ValueRange acc) {
        return SmallVector<Value>{arith::AddFOp::create(b, loc, load(scores, {i}), acc[0])};
      })[0];
      // Every thread has read every exponential before any is overwritten.
      gpu::BarrierOp::create(b, loc);
      ifThen(active, [&] {
        store(arith::DivFOp::create(b, loc, load(scores, {e}), rowSum), scores, {e});
      });
    } else {
      ifThen(active, [&] {
        Value ex = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, load(raw, {e})));
        Value den = arith::AddFOp::create(b, loc, fone, ex);
        store(arith::DivFOp::create(b, loc, fone, den), scores, {e});
      });
    }
    ifThen(active, [&] {
      Value s = load(scores, {e});
      if (bias)
        s = arith::AddFOp::create(b, loc, s, load(bias, {e}));
      store(s, selection, {e});
    });
    gpu::BarrierOp::create(b, loc);

    int64_t groups = routing.getNGroup(), keepGroups = routing.getTopkGroup();
    if (groups > 1 && keepGroups < groups) {
      int64_t perGroup = experts / groups;
      // A group's score: its two best selection scores added in index order
      // to 0 (its best with group_max).
      ifThen(cmp(arith::CmpIPredicate::ult, e, idx(groups)), [&] {
        Value begin = arith::MulIOp::create(b, loc, e, idx(perGroup));
        Value end = arith::AddIOp::create(b, loc, begin, idx(perGroup));
        Value yes = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
        Value no = arith::ConstantOp::create(b, loc, b.getBoolAttr(false));
        auto [v1, i1] = bestBelow(selection, begin, end, yes, fzero, zero);
        Value sum = arith::AddFOp::create(b, loc, fzero, v1);
        if (!routing.getGroupMax()) {
          auto [v2, i2] = bestBelow(selection, begin, end, no, v1, i1);
          Value firstLower = cmp(arith::CmpIPredicate::ult, i1, i2);
          Value lower = arith::SelectOp::create(b, loc, firstLower, v1, v2);
          Value higher = arith::SelectOp::create(b, loc, firstLower, v2, v1);
          sum = arith::AddFOp::create(b, loc, arith::AddFOp::create(b, loc, fzero, lower), higher);
        }
        store(sum, groupScores, {e});
      });
      gpu::BarrierOp::create(b, loc);
      // Experts of the groups ranked at topk_group or below drop out. Nobody
      // reads the selection scores between the barriers around this write.
      ifThen(active, [&] {
        Value group = arith::DivUIOp::create(b, loc, e, idx(perGroup));
        Value dropped =
            cmp(arith::CmpIPredicate::uge, rank(groupScores, groups, group), idx(keepGroups));
        ifThen(dropped, [&] { store(ninf, selection, {e}); });
      });
      gpu::BarrierOp::create(b, loc);
    }

    // The experts ranked 0..k-1 are the choices, in rank order.
    int64_t topK = routing.getTopK();
    ifThen(active, [&] {
      Value r = rank(selection, experts, e);
      ifThen(cmp(arith::CmpIPredicate::ult, r, idx(topK)), [&] {
        store(arith::IndexCastOp::create(b, loc, b.getI32Type(), e), ids, {t, r});
        store(load(scores, {e}), chosen, {r});
      });
    });
    gpu::BarrierOp::create(b, loc);
    ifThen(cmp(arith::CmpIPredicate::eq, e, zero), [&] {
      Value numChoices = idx(topK);
      Value sum = fold(zero, numChoices, ValueRange{fzero}, [&](Value j, ValueRange acc) {
        return SmallVector<Value>{arith::AddFOp::create(b, loc, load(chosen, {j}), acc[0])};
      })[0];
      double scale = routing.getScale().convertToDouble();
      bool rescale = routing.getNormalize() || scale != 1.0;
      Value denominator = routing.getNormalize() ? sum : fone;
      fold(zero, numChoices, ValueRange{}, [&](Value j, ValueRange) {
        Value w = load(chosen, {j});
        if (rescale)
          w = arith::MulFOp::create(b, loc, arith::DivFOp::create(b, loc, w, denominator),
                                    f32(scale));
        store(w, weights, {t, j});
        return SmallVector<Value>{};
      });
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
    auto f32Buffer = [](Value buffer) {
      return !buffer || cast<MemRefType>(buffer.getType()).getElementType().isF32();
    };
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Value logitBias = op.getLogitBias() ? readBuffer(b, loc, op.getLogitBias()) : Value();
    Value bias = op.getCorrectionBias() ? readBuffer(b, loc, op.getCorrectionBias()) : Value();
    if (!f32Buffer(logitBias) || !f32Buffer(bias))
      return rewriter.notifyMatchFailure(op, "f32 biases");
    RoutingAttr routing = op.getRouting();
    int64_t topK = routing.getTopK(), groups = routing.getNGroup();
    Value rows = tensor::DimOp::create(b, loc, op.getX(), 0);
    auto bufferOf = [&](int64_t cols, Type element) -> Value {
      auto type = MemRefType::get({xType.getDimSize(0), cols}, element);
      return memref::AllocOp::create(b, loc, type,
                                     type.isDynamicDim(0) ? ValueRange{rows} : ValueRange{});
    };
    Value logits = bufferOf(experts, b.getF32Type());
    buildDenseTensorCoreGemm(b, loc, readBuffer(b, loc, op.getX()),
                             readBuffer(b, loc, op.getRouterWeight()), logits, rows, experts,
                             hidden);
    Value ids = bufferOf(topK, b.getI32Type());
    Value weights = bufferOf(topK, b.getF32Type());

    auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
    auto shared = [&](int64_t size) {
      return MemRefType::get({size}, b.getF32Type(), MemRefLayoutAttrInterface{}, workgroup);
    };
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    Value threads = arith::ConstantIndexOp::create(b, loc, (experts + 31) / 32 * 32);
    auto launch = gpu::LaunchOp::create(
        b, loc, rows, one, one, threads, one, one, nullptr, nullptr, {},
        TypeRange{shared(experts), shared(experts), shared(experts), shared(groups),
                  shared(topK)});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&launch.getBody().front());
      ArrayRef<BlockArgument> memory = launch.getWorkgroupAttributions();
      TokenKernel{{b, loc}, routing, experts}.build(
          launch.getBlockIds().x, launch.getThreadIds().x, logits, logitBias, bias, ids, weights,
          memory[0], memory[1], memory[2], memory[3], memory[4]);
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
