//===- QuantizeGPU.cpp - bf16 rows to E4M3 codes and group scales ---------===//
//
// The rows an FP8 x FP8 GEMM multiplies (GemmWgmma.cpp's FP8 rows form),
// quantized as DeepSeek-V3's inference quantizes activations: per group of
// 128 of a row, scale = amax / 448 and codes = e4m3(x / scale) (an f32
// division), rounded to nearest and saturated (cvt.rn.satfinite.e4m3x2.f32).
// A thread takes 8
// elements (16 bytes); the group's threads, consecutive lanes of one warp,
// meet at its amax through xor shuffles, so every thread of the launch runs
// them (the ones past the rows on a copy of the first row) and only the
// stores are guarded. Rows that are a static worst case (an expert-parallel
// receive buffer) are quantized up to offsets[E] only, read on the device:
// the rows past it were never written.
//
//===----------------------------------------------------------------------===//
#include "GPUKernels.h"
#include "KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>

using namespace mlir;
using namespace mlir::moe;

namespace {
constexpr int64_t kThreads = 256;
/// Elements a thread quantizes: 16 bytes of bf16.
constexpr int64_t kRun = 8;
constexpr float kE4m3Max = 448.0f;
} // namespace

/// A launch of a thread per kRun elements of `rows` rows of perRow runs,
/// the builder left in its body: (the thread's run, whether it lies in the
/// rows, or with `offsets` in the first offsets[E] of them, read on the
/// device: of worst-case rows only the used ones were written).
static std::pair<Value, Value> launchRuns(KernelBuilder &k, Value rows, int64_t perRow,
                                          Value offsets, int64_t experts) {
  OpBuilder &b = k.b;
  Location loc = k.loc;
  Value runs = arith::MulIOp::create(b, loc, rows, k.idx(perRow));
  Value blocks = arith::CeilDivUIOp::create(b, loc, runs, k.idx(kThreads));
  Value one = k.idx(1);
  auto launch = gpu::LaunchOp::create(b, loc, blocks, one, one, k.idx(kThreads), one, one);
  b.setInsertionPointToStart(&launch.getBody().front());
  Value run = k.add(arith::MulIOp::create(b, loc, launch.getBlockIds().x, k.idx(kThreads)),
                    launch.getThreadIds().x);
  Value runsUsed = runs;
  if (offsets) {
    Value used = k.toIndex(k.load(offsets, {k.idx(experts)}));
    runsUsed = arith::MulIOp::create(b, loc, used, k.idx(perRow));
  }
  return {run, k.cmp(arith::CmpIPredicate::ult, run, runsUsed)};
}

void mlir::moe::buildRowQuantizeKernel(OpBuilder &b, Location loc, Value input, Value codes,
                                       Value scales, Value rows, int64_t cols, int64_t group,
                                       Value offsets, int64_t experts) {
  assert(group % kRun == 0 && cols % group == 0 && llvm::isPowerOf2_64(group / kRun) &&
         group / kRun <= 32 && "a group is a power of two of threads within a warp");
  KernelBuilder k{b, loc};
  const int64_t perRow = cols / kRun, lanes = group / kRun;
  OpBuilder::InsertionGuard guard(b);
  std::pair<Value, Value> runAndValid = launchRuns(k, rows, perRow, offsets, experts);
  Value run = runAndValid.first, valid = runAndValid.second;
  // Runs past the end take the first row's (the launch has one).
  Value safe = arith::SelectOp::create(b, loc, valid, run, k.idx(0));
  Value row = arith::DivUIOp::create(b, loc, safe, k.idx(perRow));
  Value first = arith::MulIOp::create(b, loc, arith::RemUIOp::create(b, loc, safe, k.idx(perRow)),
                                      k.idx(kRun));

  auto runType = VectorType::get({kRun}, b.getBF16Type());
  auto load = vector::LoadOp::create(b, loc, runType, input, ValueRange{row, first});
  load.setAlignment(uint64_t(16));
  Value x =
      arith::ExtFOp::create(b, loc, VectorType::get({kRun}, b.getF32Type()), load.getResult());
  Value amax = vector::ReductionOp::create(b, loc, vector::CombiningKind::MAXNUMF,
                                           math::AbsFOp::create(b, loc, x));
  Value width = k.i32(32);
  for (int64_t offset = lanes / 2; offset >= 1; offset /= 2) {
    auto other = gpu::ShuffleOp::create(b, loc, amax, k.i32(offset), width, gpu::ShuffleMode::XOR);
    amax = arith::MaxNumFOp::create(b, loc, amax, other.getShuffleResult());
  }
  Value scale = arith::DivFOp::create(b, loc, amax, k.f32(kE4m3Max));
  // A group of zeros divides by 1 (its scale stays 0).
  Value positive = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, amax, k.f32(0.0));
  Value divisor = arith::SelectOp::create(b, loc, positive, scale, k.f32(1.0));

  // Pairs of codes as i16, the first element in the low byte.
  SmallVector<Value> pairs;
  for (int64_t i = 0; i < kRun; i += 2) {
    auto scaled = [&](int64_t j) {
      Value v = vector::ExtractOp::create(b, loc, x, ArrayRef<int64_t>{j});
      return arith::DivFOp::create(b, loc, v, divisor);
    };
    Value low = scaled(i);
    Value high = scaled(i + 1);
    pairs.push_back(NVVM::ConvertF32x2ToF8x2Op::create(
        b, loc, b.getI16Type(), high, low, NVVM::FPRoundingMode::RN,
        NVVM::SaturationMode::SATFINITE, /*relu=*/false, b.getType<Float8E4M3FNType>()));
  }
  Value packed =
      vector::FromElementsOp::create(b, loc, VectorType::get({kRun / 2}, b.getI16Type()), pairs);
  Value bytes = vector::BitCastOp::create(b, loc, VectorType::get({kRun}, b.getI8Type()), packed);
  k.ifThen(valid, [&] {
    auto store = vector::StoreOp::create(b, loc, bytes, codes, ValueRange{row, first});
    store.setAlignment(uint64_t(kRun));
    Value groupStart = k.cmp(arith::CmpIPredicate::eq,
                             arith::RemUIOp::create(b, loc, first, k.idx(group)), k.idx(0));
    k.ifThen(groupStart, [&] {
      k.store(scale, scales, {row, arith::DivUIOp::create(b, loc, first, k.idx(group))});
    });
  });
  gpu::TerminatorOp::create(b, loc);
}

void mlir::moe::buildRowDequantizeKernel(OpBuilder &b, Location loc, Value codes, Value scales,
                                         Value out, Value rows, int64_t cols, int64_t group,
                                         Value offsets, int64_t experts) {
  assert(group % kRun == 0 && cols % group == 0 && "a thread's 8 codes share a scale");
  KernelBuilder k{b, loc};
  const int64_t perRow = cols / kRun;
  OpBuilder::InsertionGuard guard(b);
  std::pair<Value, Value> runAndValid = launchRuns(k, rows, perRow, offsets, experts);
  Value run = runAndValid.first, valid = runAndValid.second;
  k.ifThen(valid, [&] {
    Value row = arith::DivUIOp::create(b, loc, run, k.idx(perRow));
    Value first = arith::MulIOp::create(b, loc, arith::RemUIOp::create(b, loc, run, k.idx(perRow)),
                                        k.idx(kRun));
    auto load = vector::LoadOp::create(b, loc, VectorType::get({kRun}, b.getI8Type()), codes,
                                       ValueRange{row, first});
    load.setAlignment(uint64_t(kRun));
    Value scale = k.load(scales, {row, arith::DivUIOp::create(b, loc, first, k.idx(group))});
    Value decoded = decodeE4m3(b, loc, load.getResult());
    auto f32s = VectorType::get({kRun}, b.getF32Type());
    Value values =
        arith::MulFOp::create(b, loc, decoded, vector::BroadcastOp::create(b, loc, f32s, scale));
    Value rounded =
        arith::TruncFOp::create(b, loc, VectorType::get({kRun}, b.getBF16Type()), values);
    auto store = vector::StoreOp::create(b, loc, rounded, out, ValueRange{row, first});
    store.setAlignment(uint64_t(2 * kRun));
  });
  gpu::TerminatorOp::create(b, loc);
}

Value mlir::moe::decodeE4m3(OpBuilder &b, Location loc, Value codes) {
  auto codesType = cast<VectorType>(codes.getType());
  auto wordType = codesType.clone(b.getI32Type());
  auto splat = [&](int64_t v) {
    return arith::ConstantOp::create(b, loc,
                                     DenseElementsAttr::get(wordType, b.getI32IntegerAttr(v)));
  };
  Value word = arith::ExtUIOp::create(b, loc, wordType, codes);
  Value magnitude = arith::AndIOp::create(b, loc, word, splat(0x7f));
  Value sign =
      arith::ShLIOp::create(b, loc, arith::AndIOp::create(b, loc, word, splat(0x80)), splat(24));
  Value bits =
      arith::OrIOp::create(b, loc, sign, arith::ShLIOp::create(b, loc, magnitude, splat(20)));
  auto valueType = codesType.clone(b.getF32Type());
  Value moved = arith::BitcastOp::create(b, loc, valueType, bits);
  Value value = arith::MulFOp::create(
      b, loc, moved,
      arith::ConstantOp::create(
          b, loc, DenseElementsAttr::get(valueType, b.getF32FloatAttr(std::ldexp(1.0f, 120)))));
  Value nan = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, magnitude, splat(0x7f));
  Value nans = arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(valueType, b.getF32FloatAttr(std::nanf(""))));
  return arith::SelectOp::create(b, loc, nan, nans, value);
}
