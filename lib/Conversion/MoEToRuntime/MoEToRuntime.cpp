//===- MoEToRuntime.cpp - cross-rank moe ops to libmoert calls ------------===//
#include "moe/Conversion/Passes.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::moe {
#define GEN_PASS_DEF_CONVERTMOETORUNTIME
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
/// The same tensor with every extent dynamic: the runtime's view.
RankedTensorType erased(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return tensor.clone(SmallVector<int64_t>(tensor.getRank(), ShapedType::kDynamic));
}

Value castTo(ImplicitLocOpBuilder &b, Value v, Type type) {
  return v.getType() == type ? v : tensor::CastOp::create(b, type, v).getResult();
}

std::string suffix(Type tensorType) {
  return cast<RankedTensorType>(tensorType).getElementType().isBF16() ? "bf16"
                                                                      : "f32";
}

/// Declares `name` (private, with a C interface) unless the module has it.
func::FuncOp declare(ModuleOp module, StringRef name, FunctionType type) {
  if (auto existing = module.lookupSymbol<func::FuncOp>(name))
    return existing;
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  auto func = func::FuncOp::create(b, module.getLoc(), name, type);
  func.setPrivate();
  func->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  return func;
}

struct ConvertMoEToRuntimePass
    : moe::impl::ConvertMoEToRuntimeBase<ConvertMoEToRuntimePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    module.walk([&](EpDispatchOp op) { lowerDispatch(module, op); });
    module.walk([&](EpCombineOp op) { lowerCombine(module, op); });
    module.walk([&](AgreeCountOp op) { lowerAgreeCount(module, op); });
  }

  void lowerAgreeCount(ModuleOp module, AgreeCountOp op) {
    ImplicitLocOpBuilder b(op.getLoc(), op);
    Value local = arith::IndexCastOp::create(b, b.getI64Type(), op.getLocal());
    auto callee = declare(module, "moert_agree_chunks",
                          b.getFunctionType({b.getI64Type()}, {b.getI64Type()}));
    callee->removeAttr("llvm.emit_c_interface"); // scalars only: plain C
    Value agreed = func::CallOp::create(b, callee, ValueRange{local}).getResult(0);
    op.getAgreed().replaceAllUsesWith(
        arith::IndexCastOp::create(b, b.getIndexType(), agreed).getResult());
    op.erase();
  }

  void lowerDispatch(ModuleOp module, EpDispatchOp op) {
    ImplicitLocOpBuilder b(op.getLoc(), op);
    SmallVector<Value> args = {
        castTo(b, op.getX(), erased(op.getX().getType())),
        castTo(b, op.getExpertIds(), erased(op.getExpertIds().getType())),
        castTo(b, op.getExpertWeights(), erased(op.getExpertWeights().getType())),
        castTo(b, op.getExpertRank(), erased(op.getExpertRank().getType())),
        arith::ConstantOp::create(b, b.getI64IntegerAttr(op.getCapacity()))};
    SmallVector<Type> results = {erased(op.getReceived().getType()),
                                 erased(op.getLocalIds().getType()),
                                 erased(op.getLocalWeights().getType()),
                                 b.getI64Type()};
    std::string scheme;
    if (auto quant = op.getQuantization())
      scheme = *quant == DispatchQuantization::fp8_e4m3_g128 ? "fp8g128_" : "fp8g32ue8m0_";
    auto callee = declare(module, "moert_ep_dispatch_" + scheme + suffix(op.getX().getType()),
                          b.getFunctionType(ValueRange(args).getTypes(), results));
    auto call = func::CallOp::create(b, callee, args);
    op.getReceived().replaceAllUsesWith(castTo(b, call.getResult(0), op.getReceived().getType()));
    op.getLocalIds().replaceAllUsesWith(castTo(b, call.getResult(1), op.getLocalIds().getType()));
    op.getLocalWeights().replaceAllUsesWith(
        castTo(b, call.getResult(2), op.getLocalWeights().getType()));
    op.getHandle().replaceAllUsesWith(call.getResult(3));
    op.erase();
  }

  void lowerCombine(ModuleOp module, EpCombineOp op) {
    ImplicitLocOpBuilder b(op.getLoc(), op);
    SmallVector<Value> args = {
        castTo(b, op.getPartial(), erased(op.getPartial().getType())), op.getHandle()};
    Type result = erased(op.getType());
    auto callee = declare(module, "moert_ep_combine_" + suffix(op.getType()),
                          b.getFunctionType(ValueRange(args).getTypes(), {result}));
    auto call = func::CallOp::create(b, callee, args);
    op.getResult().replaceAllUsesWith(castTo(b, call.getResult(0), op.getType()));
    op.erase();
  }
};
} // namespace
