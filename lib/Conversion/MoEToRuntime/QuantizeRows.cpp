//===- QuantizeRows.cpp - FP8 E4M3 rows as linalg, for the all-gather dispatch ===//
//
// Integer arithmetic on the f32 bits, as runtime/lib/Quantize.cpp does it:
// no FP8 type reaches LLVM (its arith lowering has none for E4M3), and the
// same IR becomes CPU loops or GPU kernels.
//
//===----------------------------------------------------------------------===//
#include "QuantizeRows.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::moe;

namespace {
constexpr float kE4m3Max = 448.0f;

/// Scalar arithmetic inside a linalg body, on i32 bits and f32 values.
struct Scalar {
  ImplicitLocOpBuilder &b;

  Value i32(int64_t v) { return arith::ConstantIntOp::create(b, b.getI32Type(), v); }
  Value f32(float v) { return arith::ConstantOp::create(b, b.getF32FloatAttr(v)); }
  Value bits(Value f) { return arith::BitcastOp::create(b, b.getI32Type(), f); }
  Value real(Value i) { return arith::BitcastOp::create(b, b.getF32Type(), i); }
  Value mask(Value a, int64_t m) { return arith::AndIOp::create(b, a, i32(m)); }
  Value shr(Value a, int64_t n) { return arith::ShRUIOp::create(b, a, i32(n)); }
  Value shl(Value a, int64_t n) { return arith::ShLIOp::create(b, a, i32(n)); }
  Value add(Value a, Value c) { return arith::AddIOp::create(b, a, c); }
  Value orI(Value a, Value c) { return arith::OrIOp::create(b, a, c); }
  Value cmp(arith::CmpIPredicate p, Value a, int64_t v) {
    return arith::CmpIOp::create(b, p, a, i32(v));
  }
  Value pick(Value c, Value t, Value f) { return arith::SelectOp::create(b, c, t, f); }
  Value widen(Value v) {
    return v.getType().isF32() ? v : arith::ExtFOp::create(b, b.getF32Type(), v).getResult();
  }

  /// The f32 a group's scale stands for: itself, or 2^(byte - 127).
  Value scaleValue(Value scale, DispatchQuantization scheme) {
    if (scheme == DispatchQuantization::fp8_e4m3_g128)
      return scale;
    Value byte = arith::ExtUIOp::create(b, b.getI32Type(), scale);
    // Byte 0 is 2^-127, an f32 subnormal.
    return real(pick(cmp(arith::CmpIPredicate::eq, byte, 0), i32(0x00400000), shl(byte, 23)));
  }

  /// The scale of a group from its finite amax.
  Value scaleOf(Value amax, DispatchQuantization scheme) {
    if (scheme == DispatchQuantization::fp8_e4m3_g128)
      return arith::DivFOp::create(b, amax, f32(kE4m3Max));
    // amax = 1.f * 2^(be - 127); 448 = 1.75 * 2^8: e = be - 135 while
    // 1.f <= 1.75, else one more; byte = e + 127, at least 0 (2^-127).
    Value bitsOf = bits(amax);
    Value biased = shr(bitsOf, 23);
    Value within = cmp(arith::CmpIPredicate::ule, mask(bitsOf, 0x7fffff), 0x600000);
    Value byte = arith::SubIOp::create(b, biased, pick(within, i32(8), i32(7)));
    byte = arith::MaxSIOp::create(b, byte, i32(0));
    return arith::TruncIOp::create(b, b.getI8Type(), byte);
  }

  /// runtime's quantizeElement(x, scale): the E4M3 code of x / scale.
  Value code(Value x, Value scale) {
    Value v = widen(x);
    Value vBits = bits(v);
    Value sign = mask(shr(vBits, 24), 0x80);
    Value abs = mask(vBits, 0x7fffffff);
    Value q = arith::DivFOp::create(b, v, scale);
    Value qAbs = mask(bits(q), 0x7fffffff);
    // Below 2^-6: steps of 2^-9; qAbs * 512 < 8 is exact, and adding 2^23
    // rounds it to an integer, ties to even. 8 is code 0x08, the smallest normal.
    Value steps = arith::AddFOp::create(b, arith::MulFOp::create(b, real(qAbs), f32(512.0f)),
                                        f32(8388608.0f));
    Value subnormal = arith::SubIOp::create(b, bits(steps), i32(0x4b000000));
    // Normal: 3 of 23 mantissa bits, ties to even; the carry goes into the
    // exponent; the bias 127 becomes 7.
    Value rounded = shr(add(add(qAbs, i32(0x7ffff)), mask(shr(qAbs, 20), 1)), 20);
    Value normal = arith::SubIOp::create(b, rounded, i32(120 << 3));
    Value magnitude =
        pick(cmp(arith::CmpIPredicate::ult, qAbs, 0x3c800000), subnormal,
             pick(cmp(arith::CmpIPredicate::uge, qAbs, 0x43e00000), i32(0x7e), normal));
    Value noScale = arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, scale, f32(0.0f));
    magnitude = pick(noScale, i32(0), magnitude);
    magnitude = pick(cmp(arith::CmpIPredicate::eq, abs, 0x7f800000), i32(0x7e), magnitude);
    magnitude = pick(cmp(arith::CmpIPredicate::ugt, abs, 0x7f800000), i32(0x7f), magnitude);
    return arith::TruncIOp::create(b, b.getI8Type(), orI(sign, magnitude));
  }

  /// runtime's e4m3ToFloat(code): exact.
  Value decode(Value code) {
    Value c = arith::ExtUIOp::create(b, b.getI32Type(), code);
    Value exponent = mask(shr(c, 3), 0xf), mantissa = mask(c, 7);
    Value sign = shl(mask(c, 0x80), 24);
    Value normal = orI(orI(sign, shl(add(exponent, i32(120)), 23)), shl(mantissa, 20));
    Value steps = arith::MulFOp::create(b, arith::UIToFPOp::create(b, b.getF32Type(), mantissa),
                                        f32(1.0f / 512.0f));
    Value subnormal = orI(sign, bits(steps));
    Value value = pick(cmp(arith::CmpIPredicate::eq, exponent, 0), subnormal, normal);
    value =
        pick(cmp(arith::CmpIPredicate::eq, mask(c, 0x7f), 0x7f), orI(sign, i32(0x7fc00000)), value);
    return real(value);
  }
};

/// [T, H] as [T, H/group, group].
Value splitGroups(ImplicitLocOpBuilder &b, Value rows, int64_t group) {
  auto type = cast<RankedTensorType>(rows.getType());
  auto split = RankedTensorType::get({type.getDimSize(0), type.getDimSize(1) / group, group},
                                     type.getElementType());
  return tensor::ExpandShapeOp::create(b, split, rows,
                                       SmallVector<ReassociationIndices>{{0}, {1, 2}});
}

Value joinGroups(ImplicitLocOpBuilder &b, Value rows) {
  return tensor::CollapseShapeOp::create(b, rows, SmallVector<ReassociationIndices>{{0}, {1, 2}});
}

/// An empty tensor of `shape` (rows possibly dynamic, as `like`'s).
Value empty(ImplicitLocOpBuilder &b, Value like, ArrayRef<int64_t> shape, Type element) {
  SmallVector<Value> dynamic;
  if (ShapedType::isDynamic(shape[0]))
    dynamic.push_back(tensor::DimOp::create(b, like, 0));
  return tensor::EmptyOp::create(b, shape, element, dynamic);
}

SmallVector<utils::IteratorType> iterators(int n, bool reduceLast = false) {
  SmallVector<utils::IteratorType> kinds(n, utils::IteratorType::parallel);
  if (reduceLast)
    kinds.back() = utils::IteratorType::reduction;
  return kinds;
}
} // namespace

int64_t moe::quantGroup(DispatchQuantization scheme) {
  return scheme == DispatchQuantization::fp8_e4m3_g128 ? 128 : 32;
}

Type moe::scaleElementType(Builder &b, DispatchQuantization scheme) {
  return scheme == DispatchQuantization::fp8_e4m3_g128 ? Type(b.getF32Type()) : Type(b.getI8Type());
}

std::pair<Value, Value> moe::quantizeRows(ImplicitLocOpBuilder &b, Value x,
                                          DispatchQuantization scheme) {
  const int64_t group = quantGroup(scheme);
  Value split = splitGroups(b, x, group);
  auto splitType = cast<RankedTensorType>(split.getType());
  const int64_t rows = splitType.getDimSize(0), groups = splitType.getDimSize(1);
  MLIRContext *ctx = b.getContext();
  AffineMap all = AffineMap::getMultiDimIdentityMap(3, ctx);
  AffineMap perGroup = AffineMap::get(3, 0, {b.getAffineDimExpr(0), b.getAffineDimExpr(1)}, ctx);

  // amax over the group's finite elements.
  Value zero = arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f));
  Value amaxInit =
      linalg::FillOp::create(b, zero, empty(b, x, {rows, groups}, b.getF32Type())).getResult(0);
  Value amax = linalg::GenericOp::create(
                   b, TypeRange{amaxInit.getType()}, ValueRange{split}, ValueRange{amaxInit},
                   SmallVector<AffineMap>{all, perGroup}, iterators(3, /*reduceLast=*/true),
                   [&](OpBuilder &nb, Location loc, ValueRange in) {
                     ImplicitLocOpBuilder ib(loc, nb);
                     Scalar s{ib};
                     Value abs = s.mask(s.bits(s.widen(in[0])), 0x7fffffff);
                     Value finite = s.cmp(arith::CmpIPredicate::ult, abs, 0x7f800000);
                     Value v = s.pick(finite, s.real(abs), s.f32(0.0f));
                     Value larger = arith::CmpFOp::create(ib, arith::CmpFPredicate::OGT, v, in[1]);
                     linalg::YieldOp::create(ib, s.pick(larger, v, in[1]));
                   })
                   .getResult(0);

  Type scaleType = scaleElementType(b, scheme);
  AffineMap same = AffineMap::getMultiDimIdentityMap(2, ctx);
  Value scales = linalg::GenericOp::create(
                     b, TypeRange{RankedTensorType::get({rows, groups}, scaleType)},
                     ValueRange{amax}, ValueRange{empty(b, x, {rows, groups}, scaleType)},
                     SmallVector<AffineMap>{same, same}, iterators(2),
                     [&](OpBuilder &nb, Location loc, ValueRange in) {
                       ImplicitLocOpBuilder ib(loc, nb);
                       linalg::YieldOp::create(ib, Scalar{ib}.scaleOf(in[0], scheme));
                     })
                     .getResult(0);

  Value codes =
      linalg::GenericOp::create(
          b, TypeRange{RankedTensorType::get({rows, groups, group}, b.getI8Type())},
          ValueRange{split, scales}, ValueRange{empty(b, x, {rows, groups, group}, b.getI8Type())},
          SmallVector<AffineMap>{all, perGroup, all}, iterators(3),
          [&](OpBuilder &nb, Location loc, ValueRange in) {
            ImplicitLocOpBuilder ib(loc, nb);
            Scalar s{ib};
            linalg::YieldOp::create(ib, s.code(in[0], s.scaleValue(in[1], scheme)));
          })
          .getResult(0);
  return {joinGroups(b, codes), scales};
}

Value moe::dequantizeRows(ImplicitLocOpBuilder &b, Value codes, Value scales,
                          DispatchQuantization scheme, RankedTensorType type) {
  Value split = splitGroups(b, codes, quantGroup(scheme));
  auto splitType = cast<RankedTensorType>(split.getType());
  MLIRContext *ctx = b.getContext();
  AffineMap all = AffineMap::getMultiDimIdentityMap(3, ctx);
  AffineMap perGroup = AffineMap::get(3, 0, {b.getAffineDimExpr(0), b.getAffineDimExpr(1)}, ctx);
  Type element = type.getElementType();
  Value values =
      linalg::GenericOp::create(b, TypeRange{splitType.clone(element)}, ValueRange{split, scales},
                                ValueRange{empty(b, codes, splitType.getShape(), element)},
                                SmallVector<AffineMap>{all, perGroup, all}, iterators(3),
                                [&](OpBuilder &nb, Location loc, ValueRange in) {
                                  ImplicitLocOpBuilder ib(loc, nb);
                                  Scalar s{ib};
                                  Value v = arith::MulFOp::create(ib, s.decode(in[0]),
                                                                  s.scaleValue(in[1], scheme));
                                  if (!element.isF32())
                                    v = arith::TruncFOp::create(ib, element, v);
                                  linalg::YieldOp::create(ib, v);
                                })
          .getResult(0);
  return joinGroups(b, values);
}

Value moe::scalesAsF32(ImplicitLocOpBuilder &b, Value scales, DispatchQuantization scheme) {
  if (scheme == DispatchQuantization::fp8_e4m3_g128)
    return scales;
  auto type = cast<RankedTensorType>(scales.getType());
  AffineMap same = AffineMap::getMultiDimIdentityMap(2, b.getContext());
  return linalg::GenericOp::create(b, TypeRange{type.clone(b.getF32Type())}, ValueRange{scales},
                                   ValueRange{empty(b, scales, type.getShape(), b.getF32Type())},
                                   SmallVector<AffineMap>{same, same}, iterators(2),
                                   [&](OpBuilder &nb, Location loc, ValueRange in) {
                                     ImplicitLocOpBuilder ib(loc, nb);
                                     linalg::YieldOp::create(ib,
                                                             Scalar{ib}.scaleValue(in[0], scheme));
                                   })
      .getResult(0);
}
