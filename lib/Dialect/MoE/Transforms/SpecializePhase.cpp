//===- SpecializePhase.cpp - prefill and decode variants of MoE functions -===//
#include "moe/Dialect/MoE/Analysis/PhasePlan.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/Transforms/Passes.h"
#include "moe/Support/Limits.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOESPECIALIZEPHASE
#include "moe/Dialect/MoE/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
constexpr StringLiteral kUniformArg = "moe.uniform";

SmallVector<LayerOp> layersOf(func::FuncOp func) {
  SmallVector<LayerOp> layers;
  func.walk([&](LayerOp layer) { layers.push_back(layer); });
  return layers;
}

struct MoESpecializePhasePass
    : moe::impl::MoESpecializePhaseBase<MoESpecializePhasePass> {
  using MoESpecializePhaseBase::MoESpecializePhaseBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (decodeMaxTokens <= 0 || decodeMaxTokens > limits::kMaxTokens) {
      module.emitError("moe-specialize-phase needs decode-max-tokens in [1, ")
          << limits::kMaxTokens << "], got " << int64_t(decodeMaxTokens);
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> functions;
    for (auto func : module.getOps<func::FuncOp>())
      if (func.isPublic() && !func.isExternal() && !layersOf(func).empty() &&
          llvm::none_of(layersOf(func), [](LayerOp l) { return l.getPhase(); }))
        functions.push_back(func);
    for (func::FuncOp func : functions)
      if (failed(specialize(module, func)))
        return signalPassFailure();
  }

  LogicalResult specialize(ModuleOp module, func::FuncOp func) {
    // The threshold counts the tokens of the first layer's input.
    LayerOp first = layersOf(func).front();
    auto input = dyn_cast<BlockArgument>(first.getX());
    if (!input || input.getOwner() != &func.getBody().front())
      return first.emitError("moe-specialize-phase: the layer's input must be "
                             "an argument of @")
             << func.getSymName() << " (it counts the tokens that pick the phase)";

    // The decode variant of a layer without max_tokens_per_rank takes the
    // threshold as its maximum: check what that plans (layer_c11) first.
    for (LayerOp layer : layersOf(func)) {
      if (layer.getMaxTokensPerRank())
        continue;
      int64_t most = planPhases(decodeMaxTokens, layerBound(layer)).decodeMaxTokens;
      LayerShape shape;
      shape.hidden = layer.getX().getType().getDimSize(1);
      shape.intermediate = layer.getW2().getType().getDimSize(2);
      shape.experts = layer.getRouterWeight().getType().getDimSize(0);
      shape.topK = layer.getRouting().getTopK();
      shape.ep = layer.getLayout().getEp();
      shape.elementBytes = layer.getX().getType().getElementTypeBitWidth() / 8;
      if (std::optional<std::string> why = checkPlannedSizes(shape, most))
        return layer.emitError("moe-specialize-phase: decode-max-tokens = ")
               << int64_t(decodeMaxTokens) << " is too large for this layer: " << *why;
    }

    // The entry gains the phase argument: a call to it would no longer match.
    if (std::optional<SymbolTable::UseRange> uses = SymbolTable::getSymbolUses(func, module))
      for (const SymbolTable::SymbolUse &use : *uses)
        return use.getUser()->emitError("moe-specialize-phase: @")
               << func.getSymName()
               << " holds a layer and is called here; it is the entry that gains the phase "
                  "argument, so it must not be called (make the caller the entry, or inline it)";

    SymbolTable symbols(module);
    func::FuncOp prefill = cloneVariant(symbols, func, "_prefill", Phase::prefill);
    func::FuncOp decode = cloneVariant(symbols, func, "_decode", Phase::decode);
    // Decode only when every layer of the variant takes the tokens.
    int64_t threshold = decodeMaxTokens;
    Builder b(module.getContext());
    for (LayerOp layer : layersOf(decode)) {
      int64_t most = planPhases(decodeMaxTokens, layerBound(layer)).decodeMaxTokens;
      layer.setMaxTokensPerRankAttr(b.getI64IntegerAttr(most));
      threshold = std::min(threshold, most);
      // A static token count above the decode maximum (layer_c10) is seen
      // as dynamic by the decode variant: it never runs it by count, and
      // when asked to (phase = 2) the layout's capacity check fails at run
      // time, as for a dynamic count.
      int64_t tokens = layer.getX().getType().getDimSize(0);
      if (!ShapedType::isDynamic(tokens) && tokens > most)
        eraseTokenCount(layer);
    }
    // Ranks agree on the count when any layer spans ranks, not only the first.
    int64_t ep = 1;
    for (LayerOp layer : layersOf(func))
      ep = std::max<int64_t>(ep, layer.getLayout().getEp());
    buildEntry(func, input.getArgNumber(), prefill, decode, ep, threshold);
    ++numSpecialized;
    return success();
  }

  /// The most tokens `layer` takes: max_tokens_per_rank, or a static token
  /// count (at least 1: the maximum is positive), whichever is smaller.
  static std::optional<int64_t> layerBound(LayerOp layer) {
    std::optional<int64_t> bound = layer.getMaxTokensPerRank();
    int64_t tokens = layer.getX().getType().getDimSize(0);
    if (!ShapedType::isDynamic(tokens)) {
      int64_t positive = std::max<int64_t>(tokens, 1);
      bound = std::min(bound.value_or(positive), positive);
    }
    return bound;
  }

  /// Runs `layer` on a view of its input with a dynamic token count.
  static void eraseTokenCount(LayerOp layer) {
    OpBuilder b(layer);
    auto staticType = layer.getX().getType();
    auto dynamicType = staticType.clone({ShapedType::kDynamic, staticType.getDimSize(1)});
    Value x = tensor::CastOp::create(b, layer.getLoc(), dynamicType, layer.getX());
    layer.getXMutable().assign(x);
    layer.getY().setType(dynamicType);
    b.setInsertionPointAfter(layer);
    auto back = tensor::CastOp::create(b, layer.getLoc(), staticType, layer.getY());
    layer.getY().replaceAllUsesExcept(back.getResult(), back);
  }

  func::FuncOp cloneVariant(SymbolTable &symbols, func::FuncOp func,
                            StringRef suffix, Phase phase) {
    func::FuncOp variant = func.clone();
    variant.setSymName((func.getSymName() + suffix).str());
    symbols.insert(variant, Block::iterator(func));
    for (LayerOp layer : layersOf(variant))
      layer.setPhaseAttr(PhaseAttr::get(layer.getContext(), phase));
    return variant;
  }

  /// @f(args..., %phase) picks a variant and calls it.
  void buildEntry(func::FuncOp func, unsigned inputArg, func::FuncOp prefill,
                  func::FuncOp decode, int64_t ep, int64_t threshold) {
    Block &entry = func.getBody().front();
    while (!entry.empty())
      entry.back().erase();
    func.getBody().getBlocks().erase(std::next(func.getBody().begin()),
                                     func.getBody().end());
    auto i32 = IntegerType::get(func.getContext(), 32);
    (void)func.insertArgument(func.getNumArguments(), i32,
                              DictionaryAttr::get(func.getContext(),
                                                  {NamedAttribute(
                                                      kUniformArg,
                                                      UnitAttr::get(func.getContext()))}),
                              func.getLoc());
    Value phase = func.getArguments().back();
    SmallVector<Value> args(func.getArguments().drop_back());

    ImplicitLocOpBuilder b(func.getLoc(), func.getContext());
    b.setInsertionPointToStart(&entry);
    auto constant = [&](int64_t v) {
      return arith::ConstantOp::create(b, b.getI32IntegerAttr(v)).getResult();
    };
    Value known = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, phase,
                                        constant(int64_t(PhaseArg::Decode)));
    cf::AssertOp::create(b, known,
                         "moe: phase must be 0 (by token count), 1 (prefill) or 2 (decode)");
    Value automatic = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, phase,
                                            constant(int64_t(PhaseArg::Auto)));
    auto choose = scf::IfOp::create(
        b, TypeRange{b.getI1Type()}, automatic, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(choose.thenBlock());
      Value tokens = tensor::DimOp::create(b, args[inputArg], 0);
      // Every rank must choose alike: compare the group's largest count.
      if (ep > 1)
        tokens = AgreeCountOp::create(b, b.getIndexType(), tokens, Agreement::phase_tokens);
      Value fits = arith::CmpIOp::create(
          b, arith::CmpIPredicate::ule, tokens,
          arith::ConstantIndexOp::create(b, threshold));
      scf::YieldOp::create(b, fits);
      b.setInsertionPointToStart(choose.elseBlock());
      scf::YieldOp::create(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::eq, phase,
                                   constant(int64_t(PhaseArg::Decode)))
                 .getResult());
    }
    auto run = scf::IfOp::create(b, func.getResultTypes(), choose.getResult(0),
                                 /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      // Without results scf.if already ends each block with its yield.
      auto fill = [&](Block *block, func::FuncOp callee) {
        b.setInsertionPointToStart(block);
        auto call = func::CallOp::create(b, callee, args);
        if (!call.getResults().empty())
          scf::YieldOp::create(b, call.getResults());
      };
      fill(run.thenBlock(), decode);
      fill(run.elseBlock(), prefill);
    }
    func::ReturnOp::create(b, run.getResults());
    func->setAttr("moe.phase_plan",
                  b.getDictionaryAttr(
                      {b.getNamedAttr("decode_max_tokens",
                                      b.getI64IntegerAttr(threshold)),
                       b.getNamedAttr("prefill", b.getStringAttr(prefill.getSymName())),
                       b.getNamedAttr("decode", b.getStringAttr(decode.getSymName()))}));
  }
};
} // namespace
