//===- EntryMemrefChecks.cpp - the C entry refuses views it would misread -===//
#include "moe/Conversion/Passes.h"
#include "moe/Dialect/MoE/IR/MoEDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/SymbolTable.h"

#include "llvm/Support/raw_ostream.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOECHECKENTRYMEMREFS
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;

namespace {
/// The same descriptor with nothing static: what a C caller may pass.
MemRefType openType(MemRefType type) {
  SmallVector<int64_t> dynamic(type.getRank(), ShapedType::kDynamic);
  auto layout = StridedLayoutAttr::get(type.getContext(), ShapedType::kDynamic, dynamic);
  return MemRefType::get(dynamic, type.getElementType(), layout, type.getMemorySpace());
}

std::string message(func::FuncOp func, unsigned position, MemRefType type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << func.getSymName() << ": ";
  if (auto name = func.getArgAttrOfType<StringAttr>(position, moe::kArgumentName))
    os << name.getValue();
  else
    os << "argument " << position;
  os << " must be a dense row-major array of shape [";
  llvm::interleaveComma(type.getShape(), os, [&](int64_t d) {
    if (ShapedType::isDynamic(d))
      os << "?";
    else
      os << d;
  });
  os << "] at offset 0 (a contiguous array; ? is any size >= 0)";
  return text;
}

/// Whether the descriptor `meta` describes (of an argument of the open type)
/// is what a body compiled for `type` reads: static sizes, sizes >= 0,
/// offset 0, row-major strides. A dimension of size <= 1 may have any
/// stride, and an empty array any strides (no element is read).
Value describesType(ImplicitLocOpBuilder &b, memref::ExtractStridedMetadataOp meta,
                    MemRefType type) {
  using P = arith::CmpIPredicate;
  auto index = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v).getResult(); };
  auto cmp = [&](P p, Value l, Value r) { return arith::CmpIOp::create(b, p, l, r).getResult(); };
  auto all = [&](ArrayRef<Value> conditions) {
    Value result = conditions.front();
    for (Value c : conditions.drop_front())
      result = arith::AndIOp::create(b, result, c);
    return result;
  };
  auto any = [&](ArrayRef<Value> conditions) {
    Value result = conditions.front();
    for (Value c : conditions.drop_front())
      result = arith::OrIOp::create(b, result, c);
    return result;
  };
  Value zero = index(0), one = index(1);
  SmallVector<Value> fits{cmp(P::eq, meta.getOffset(), zero)};
  for (auto [size, expected] : llvm::zip(meta.getSizes(), type.getShape()))
    fits.push_back(ShapedType::isDynamic(expected) ? cmp(P::sge, size, zero)
                                                   : cmp(P::eq, size, index(expected)));
  // Row-major strides of the sizes passed, a zero size counting as one (as
  // numpy and torch lay out empty arrays).
  SmallVector<Value> stridesFit, empty;
  Value dense = one;
  for (int64_t d = type.getRank() - 1; d >= 0; --d) {
    Value size = meta.getSizes()[d];
    stridesFit.push_back(
        arith::OrIOp::create(b, cmp(P::sle, size, one), cmp(P::eq, meta.getStrides()[d], dense)));
    empty.push_back(cmp(P::eq, size, zero));
    if (d > 0)
      dense = arith::MulIOp::create(b, dense, arith::MaxSIOp::create(b, size, one));
  }
  if (!stridesFit.empty())
    fits.push_back(arith::OrIOp::create(b, any(empty), all(stridesFit)));
  return all(fits);
}

/// `arg` as `type` (identity layout): offset 0, the static sizes and the
/// dynamic ones passed, row-major strides. Not a memref.cast: consumers fold
/// casts away (memref::foldMemRefCast), and would then read the open type.
Value identityView(ImplicitLocOpBuilder &b, Value arg, memref::ExtractStridedMetadataOp meta,
                   MemRefType type) {
  SmallVector<OpFoldResult> sizes, strides(type.getRank());
  for (auto [size, passed] : llvm::zip(type.getShape(), meta.getSizes()))
    sizes.push_back(ShapedType::isDynamic(size) ? OpFoldResult(passed)
                                                : OpFoldResult(b.getIndexAttr(size)));
  OpFoldResult dense = b.getIndexAttr(1);
  for (int64_t d = type.getRank() - 1; d >= 0; --d) {
    strides[d] = dense;
    auto known = getConstantIntValue(dense), size = getConstantIntValue(sizes[d]);
    if (known && size)
      dense = b.getIndexAttr(*known * *size);
    else
      dense = arith::MulIOp::create(b, getValueOrCreateConstantIndexOp(b, b.getLoc(), dense),
                                    getValueOrCreateConstantIndexOp(b, b.getLoc(), sizes[d]))
                  .getResult();
  }
  return memref::ReinterpretCastOp::create(b, type, arg, b.getIndexAttr(0), sizes, strides);
}

struct EntryMemrefChecksPass : moe::impl::MoECheckEntryMemrefsBase<EntryMemrefChecksPass> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (func.isPublic() && !func.isExternal() && func->hasAttr("llvm.emit_c_interface"))
        checkArguments(func);
  }

  /// The calls of `func` in the module, or none if something else refers to
  /// it (a func.constant): its type could then not change.
  std::optional<SmallVector<func::CallOp>> callsOf(func::FuncOp func) {
    SmallVector<func::CallOp> calls;
    std::optional<SymbolTable::UseRange> uses = SymbolTable::getSymbolUses(func, getOperation());
    if (!uses)
      return std::nullopt;
    for (const SymbolTable::SymbolUse &use : *uses) {
      auto call = dyn_cast<func::CallOp>(use.getUser());
      if (!call)
        return std::nullopt;
      calls.push_back(call);
    }
    return calls;
  }

  void checkArguments(func::FuncOp func) {
    std::optional<SmallVector<func::CallOp>> calls = callsOf(func);
    if (!calls) {
      func.emitWarning("moe-check-entry-memrefs: not checked, a symbol use other than a call "
                       "refers to this function");
      return;
    }
    Block &entry = func.front();
    ImplicitLocOpBuilder b(func.getLoc(), func.getContext());
    b.setInsertionPointToStart(&entry);
    SmallVector<Type> inputs(func.getArgumentTypes());
    for (BlockArgument arg : entry.getArguments()) {
      auto type = dyn_cast<MemRefType>(arg.getType());
      if (!type || !type.getLayout().isIdentity())
        continue;
      SmallVector<OpOperand *> bodyUses;
      for (OpOperand &use : arg.getUses())
        bodyUses.push_back(&use);
      unsigned position = arg.getArgNumber();
      arg.setType(inputs[position] = openType(type));
      b.setLoc(arg.getLoc());
      auto meta = memref::ExtractStridedMetadataOp::create(b, arg);
      cf::AssertOp::create(b, describesType(b, meta, type), message(func, position, type));
      Value checked = identityView(b, arg, meta, type);
      for (OpOperand *use : bodyUses)
        use->set(checked);
    }
    func.setFunctionType(FunctionType::get(func.getContext(), inputs, func.getResultTypes()));
    // Calls inside the module (an entry calling its phase variants) pass
    // their memrefs as the open type: a cast to a more dynamic type.
    for (func::CallOp call : *calls) {
      OpBuilder at(call);
      for (OpOperand &operand : call->getOpOperands())
        if (operand.get().getType() != inputs[operand.getOperandNumber()])
          operand.set(memref::CastOp::create(at, call.getLoc(), inputs[operand.getOperandNumber()],
                                             operand.get()));
    }
  }
};
} // namespace
