//===- LinalgBuilders.cpp - small builders for linalg.generic on tensors --===//
#include "LinalgBuilders.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
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
