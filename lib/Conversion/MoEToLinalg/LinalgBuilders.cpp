//===- LinalgBuilders.cpp - small builders for linalg.generic on tensors --===//
#include "LinalgBuilders.h"

#include <cmath>
#include <limits>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::lowering;

Value lowering::buildGeneric(ImplicitLocOpBuilder &b, ValueRange inputs,
                           Value init, ArrayRef<SmallVector<unsigned>> dims,
                           unsigned numLoops, ArrayRef<unsigned> reductions,
                           BodyFn body) {
  SmallVector<AffineMap> maps;
  for (ArrayRef<unsigned> operandDims : dims)
    maps.push_back(AffineMap::getMultiDimMapWithTargets(
        numLoops, operandDims, b.getContext()));
  SmallVector<utils::IteratorType> iterators(numLoops,
                                             utils::IteratorType::parallel);
  for (unsigned r : reductions)
    iterators[r] = utils::IteratorType::reduction;
  auto op = linalg::GenericOp::create(
      b, TypeRange{init.getType()}, inputs, ValueRange{init}, maps, iterators,
      [&](OpBuilder &nb, Location loc, ValueRange args) {
        SmallVector<Value> indices;
        for (unsigned i = 0; i < numLoops; ++i)
          indices.push_back(linalg::IndexOp::create(nb, loc, i));
        Value result = body(nb, loc, indices, args);
        linalg::YieldOp::create(nb, loc, result);
      });
  return op.getResult(0);
}

Value lowering::buildEmpty(ImplicitLocOpBuilder &b, ArrayRef<OpFoldResult> sizes,
                         Type elementType) {
  return tensor::EmptyOp::create(b, sizes, elementType);
}

Value lowering::buildFilled(ImplicitLocOpBuilder &b, ArrayRef<OpFoldResult> sizes,
                          TypedAttr value) {
  Value empty = buildEmpty(b, sizes, value.getType());
  Value scalar = arith::ConstantOp::create(b, value);
  return linalg::FillOp::create(b, scalar, empty).getResult(0);
}

Value lowering::toF32(OpBuilder &b, Location loc, Value scalar) {
  if (scalar.getType().isF32())
    return scalar;
  return arith::ExtFOp::create(b, loc, b.getF32Type(), scalar);
}

Value lowering::castElements(ImplicitLocOpBuilder &b, Value tensor,
                           Type elementType) {
  auto type = cast<RankedTensorType>(tensor.getType());
  if (type.getElementType() == elementType)
    return tensor;
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, b.getLoc(), tensor);
  Value init = buildEmpty(b, sizes, elementType);
  SmallVector<unsigned> all = llvm::to_vector(
      llvm::seq<unsigned>(0, static_cast<unsigned>(type.getRank())));
  return buildGeneric(b, tensor, init, {all, all}, type.getRank(), {},
                      [&](OpBuilder &nb, Location loc, ValueRange,
                          ValueRange args) -> Value {
                        return arith::TruncFOp::create(nb, loc, elementType,
                                                       args[0]);
                      });
}

OpFoldResult lowering::mulSize(ImplicitLocOpBuilder &b, OpFoldResult size,
                             int64_t factor) {
  if (auto attr = dyn_cast<Attribute>(size))
    return b.getIndexAttr(cast<IntegerAttr>(attr).getInt() * factor);
  Value f = arith::ConstantIndexOp::create(b, factor);
  return arith::MulIOp::create(b, cast<Value>(size), f).getResult();
}

Value lowering::expand(ImplicitLocOpBuilder &b, Value t,
                     ArrayRef<OpFoldResult> sizes,
                     ArrayRef<ReassociationIndices> reassociation) {
  auto type = cast<RankedTensorType>(t.getType());
  SmallVector<int64_t> shape;
  for (OpFoldResult s : sizes) {
    auto attr = dyn_cast<Attribute>(s);
    shape.push_back(attr ? cast<IntegerAttr>(attr).getInt()
                         : ShapedType::kDynamic);
  }
  return tensor::ExpandShapeOp::create(b, type.clone(shape), t, reassociation,
                                       sizes);
}

Value lowering::collapse(ImplicitLocOpBuilder &b, Value t,
                       ArrayRef<ReassociationIndices> reassociation) {
  return tensor::CollapseShapeOp::create(b, t, reassociation);
}

Value lowering::decodeE4M3(OpBuilder &b, Location loc, Value code) {
  auto i32 = b.getI32Type();
  auto c = [&](int64_t v) { return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v)); };
  Value bits = arith::ExtUIOp::create(b, loc, i32, code);
  // Operands are named before use so that the IR does not depend on the
  // C++ compiler's argument evaluation order.
  Value c15 = c(15), c3 = c(3);
  Value shifted = arith::ShRUIOp::create(b, loc, bits, c3);
  Value exponent = arith::AndIOp::create(b, loc, shifted, c15);
  Value mantissa = arith::AndIOp::create(b, loc, bits, c(7));
  // Normal: 2^(e-7) * (1 + m/8) is f32 exponent field e + 120, mantissa m << 20.
  Value c23 = c(23), c120 = c(120);
  Value biased = arith::AddIOp::create(b, loc, exponent, c120);
  Value field = arith::ShLIOp::create(b, loc, biased, c23);
  Value c20 = c(20);
  Value mantissaBits = arith::ShLIOp::create(b, loc, mantissa, c20);
  Value normalBits = arith::OrIOp::create(b, loc, field, mantissaBits);
  Value normal = arith::BitcastOp::create(b, loc, b.getF32Type(), normalBits);
  Value step = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(std::ldexp(1.0f, -9)));
  Value mantissaF = arith::UIToFPOp::create(b, loc, b.getF32Type(), mantissa);
  Value subnormal = arith::MulFOp::create(b, loc, mantissaF, step);
  Value isSubnormal = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, exponent, c(0));
  Value magnitude = arith::SelectOp::create(b, loc, isSubnormal, subnormal, normal);
  Value c7f = c(0x7f);
  Value low = arith::AndIOp::create(b, loc, bits, c(0x7f));
  Value isNaN = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, low, c7f);
  Value nan = arith::ConstantOp::create(
      b, loc, b.getF32FloatAttr(std::numeric_limits<float>::quiet_NaN()));
  magnitude = arith::SelectOp::create(b, loc, isNaN, nan, magnitude);
  Value c0 = c(0);
  Value sign = arith::AndIOp::create(b, loc, bits, c(0x80));
  Value negative = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, sign, c0);
  Value negated = arith::NegFOp::create(b, loc, magnitude);
  return arith::SelectOp::create(b, loc, negative, negated, magnitude);
}

/// True when `other` (at index `io`) comes before `self` (at `is`) in the
/// routing order, a strict total order on (score, index) pairs: a higher
/// score first, equal scores by the lower index, and NaN below every number
/// (-inf included), NaNs among themselves by index. With it the ranks of a
/// row are a permutation even when scores are NaN, so every token gets k
/// distinct expert ids in [0, E).
Value lowering::beats(OpBuilder &b, Location loc, Value other, Value self, Value io, Value is) {
  using P = arith::CmpFPredicate;
  Value before = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, io, is);
  // Both ordered predicates are false when either side is NaN.
  Value greater = arith::CmpFOp::create(b, loc, P::OGT, other, self);
  Value equal = arith::CmpFOp::create(b, loc, P::OEQ, other, self);
  Value otherNaN = arith::CmpFOp::create(b, loc, P::UNO, other, other);
  Value selfNaN = arith::CmpFOp::create(b, loc, P::UNO, self, self);
  // Each value is named before use: C++ leaves argument order unspecified,
  // and the IR must not depend on the compiler that built us.
  Value bothNaN = arith::AndIOp::create(b, loc, otherNaN, selfNaN);
  Value tie = arith::OrIOp::create(b, loc, equal, bothNaN);
  Value yes = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
  Value otherNumber = arith::XOrIOp::create(b, loc, otherNaN, yes);
  Value numberOverNaN = arith::AndIOp::create(b, loc, selfNaN, otherNumber);
  Value tieBefore = arith::AndIOp::create(b, loc, tie, before);
  Value above = arith::OrIOp::create(b, loc, greater, numberOverNaN);
  return arith::OrIOp::create(b, loc, above, tieBefore);
}

std::pair<Value, Value>
lowering::bestBelow(OpBuilder &b, Location loc, Value begin, Value end, Value firstPick,
                    Value prevValue, Value prevIndex,
                    function_ref<Value(OpBuilder &, Location, Value)> valueAt) {
  Value no = arith::ConstantOp::create(b, loc, b.getBoolAttr(false));
  Value yes = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
  Value nan = arith::ConstantOp::create(
      b, loc, b.getF32FloatAttr(std::numeric_limits<float>::quiet_NaN()));
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  auto loop = scf::ForOp::create(
      b, loc, begin, end, one, ValueRange{nan, begin, no},
      [&](OpBuilder &nb, Location l, Value e, ValueRange acc) {
        Value v = valueAt(nb, l, e);
        // A candidate: ranked after the previous pick.
        Value after = beats(nb, l, prevValue, v, prevIndex, e);
        Value candidate = arith::OrIOp::create(nb, l, firstPick, after);
        // Better than the best candidate so far (or the first one).
        Value better = beats(nb, l, v, acc[0], e, acc[1]);
        Value none = arith::XOrIOp::create(nb, l, acc[2], yes);
        Value improves = arith::OrIOp::create(nb, l, none, better);
        Value take = arith::AndIOp::create(nb, l, candidate, improves);
        Value value = arith::SelectOp::create(nb, l, take, v, acc[0]);
        Value index = arith::SelectOp::create(nb, l, take, e, acc[1]);
        Value found = arith::OrIOp::create(nb, l, acc[2], take);
        scf::YieldOp::create(nb, l, ValueRange{value, index, found});
      });
  return {loop.getResult(0), loop.getResult(1)};
}
