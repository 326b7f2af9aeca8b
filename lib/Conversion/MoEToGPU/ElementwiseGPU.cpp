//===- ElementwiseGPU.cpp - moe.activation and moe.combine as kernels -----===//
//
// Both are memory-bound; as linalg loops mapped to threads (a thread an
// element, 2-byte loads) they ran at about a quarter of HBM's bandwidth.
// Here each thread moves 16 bytes at a time:
//
//   - moe.activation: a thread per 16 bytes of output, reading the gate's
//     and the up projection's 16 bytes of its row; the same f32 arithmetic
//     as convert-moe-to-linalg's, per element;
//   - moe.combine: a thread per 16 bytes of output, loading its token's k
//     expert rows' 16 bytes together, then summing weight * row over the
//     choices in order (f32; a negative slot adds nothing): deterministic,
//     as on the CPU. Where the combine's one use adds the shared expert's
//     output (a linalg.add), the sum starts from it and the add goes: one
//     kernel, one rounding.
//
//===----------------------------------------------------------------------===//
#include "GPUKernels.h"
#include "KernelBuilder.h"
#include "moe/Conversion/ReadBuffer.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::moe;

namespace {
constexpr int64_t kThreads = 256;
/// Blocks of a kernel striding over a count known on the device only: 8 of
/// 256 threads for each of 132 multiprocessors, about.
constexpr int64_t kStridingBlocks = 1024;

/// Elements of `type` a thread moves at a time: 16 bytes where `n` of them
/// divide into runs of that many, else one.
int64_t runOf(Type type, int64_t n) {
  int64_t width = 128 / type.getIntOrFloatBitWidth();
  return n % width == 0 ? width : 1;
}

Value sigmoid(OpBuilder &b, Location loc, Value v) {
  Value one = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1.0f));
  Value e = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, v));
  return arith::DivFOp::create(b, loc, one, arith::AddFOp::create(b, loc, one, e));
}

struct RunBuilder : KernelBuilder {
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, loc, x, y); }

  using KernelBuilder::load;
  using KernelBuilder::store;
  Value load(Value buffer, ValueRange at, VectorType type) {
    auto op = vector::LoadOp::create(b, loc, type, buffer, at);
    op.setAlignment(uint64_t(type.getNumElements() * type.getElementTypeBitWidth() / 8));
    return op;
  }
  void storeRun(Value v, Value buffer, ValueRange at) {
    auto op = vector::StoreOp::create(b, loc, v, buffer, at);
    auto type = cast<VectorType>(v.getType());
    op.setAlignment(uint64_t(type.getNumElements() * type.getElementTypeBitWidth() / 8));
  }
  Value toF32(Value v) {
    auto type = cast<VectorType>(v.getType());
    if (type.getElementType().isF32())
      return v;
    return arith::ExtFOp::create(b, loc, VectorType::get(type.getShape(), b.getF32Type()), v);
  }
  Value fromF32(Value v, Type element) {
    if (element.isF32())
      return v;
    auto type = cast<VectorType>(v.getType());
    return arith::TruncFOp::create(b, loc, VectorType::get(type.getShape(), element), v);
  }

  /// A kernel of a thread per run of `width` of the `perRow` * `width`
  /// columns of each of `rows` rows: body(row, first column).
  void launchRuns(Value rows, int64_t perRow, int64_t width,
                  function_ref<void(Value, Value)> body) {
    Value runs = mul(rows, idx(perRow));
    Value blocks = arith::CeilDivUIOp::create(b, loc, runs, idx(kThreads));
    Value one = idx(1);
    auto launch = gpu::LaunchOp::create(b, loc, blocks, one, one, idx(kThreads), one, one);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&launch.getBody().front());
    Value run = add(mul(launch.getBlockIds().x, idx(kThreads)), launch.getThreadIds().x);
    ifThen(cmp(arith::CmpIPredicate::ult, run, runs), [&] {
      Value row = arith::DivUIOp::create(b, loc, run, idx(perRow));
      body(row, mul(arith::RemUIOp::create(b, loc, run, idx(perRow)), idx(width)));
    });
    gpu::TerminatorOp::create(b, loc);
  }

  /// launchRuns over the first offsets[experts] rows only, read on the
  /// device: a fixed grid whose threads stride over their runs.
  void launchRunsOfUsedRows(Value offsets, int64_t experts, int64_t perRow, int64_t width,
                            function_ref<void(Value, Value)> body) {
    Value one = idx(1), blocks = idx(kStridingBlocks), threads = idx(kThreads);
    auto launch = gpu::LaunchOp::create(b, loc, blocks, one, one, threads, one, one);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&launch.getBody().front());
    Value used = toIndex(load(offsets, {idx(experts)}));
    Value first = add(mul(launch.getBlockIds().x, idx(kThreads)), launch.getThreadIds().x);
    Value runs = mul(used, idx(perRow));
    Value stride = idx(kStridingBlocks * kThreads);
    forEach(first, runs, stride, [&](Value run) {
      Value row = arith::DivUIOp::create(b, loc, run, idx(perRow));
      Value runInRow = arith::RemUIOp::create(b, loc, run, idx(perRow));
      body(row, mul(runInRow, idx(width)));
    });
    gpu::TerminatorOp::create(b, loc);
  }

  /// The result as the tensor `like` (a cast where its shape is static).
  Value asTensor(Value buffer, Value like) {
    auto memrefType = cast<MemRefType>(buffer.getType());
    Value t = bufferization::ToTensorOp::create(
        b, loc, RankedTensorType::get(memrefType.getShape(), memrefType.getElementType()), buffer,
        /*restrict=*/true, /*writable=*/true);
    return t.getType() == like.getType() ? t : tensor::CastOp::create(b, loc, like.getType(), t);
  }
};

/// The activation of `width` gate and up values (f32), element by element:
/// convert-moe-to-linalg's arithmetic.
Value activate(RunBuilder &u, ActivationOp op, Value gate, Value up, int64_t width) {
  OpBuilder &b = u.b;
  Location loc = u.loc;
  Value result =
      arith::ConstantOp::create(b, loc, b.getZeroAttr(VectorType::get({width}, b.getF32Type())));
  for (int64_t i = 0; i < width; ++i) {
    Value g = vector::ExtractOp::create(b, loc, gate, ArrayRef<int64_t>{i});
    Value p = vector::ExtractOp::create(b, loc, up, ArrayRef<int64_t>{i});
    Value v = op.getKind() == Activation::swiglu
                  ? swiglu(b, loc, g, p)
                  : clampedSwiglu(b, loc, g, p, op.getSwigluAlpha()->convertToFloat(),
                                  op.getSwigluLimit()->convertToFloat());
    result = vector::InsertOp::create(b, loc, v, result, ArrayRef<int64_t>{i});
  }
  return result;
}

struct ActivationToGPU : OpRewritePattern<ActivationOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ActivationOp op, PatternRewriter &rewriter) const override {
    RankedTensorType inType = op.getInput().getType();
    if (inType.isDynamicDim(1))
      return rewriter.notifyMatchFailure(op, "static I");
    Type element = inType.getElementType();
    const int64_t half = inType.getDimSize(1) / 2;
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Operation *before = op->getPrevNode();
    Value rows = tensor::DimOp::create(b, loc, op.getInput(), 0);
    Value out = memref::AllocOp::create(
        b, loc, MemRefType::get({ShapedType::kDynamic, half}, element), ValueRange{rows});
    buildActivationKernel(b, loc, op, readBuffer(b, loc, op.getInput()), out, rows);
    nameSideStreamKernels(op->hasAttr(kSideStreamAttr), before, op);
    RunBuilder u{{b, loc}};
    rewriter.replaceOp(op, u.asTensor(out, op.getResult()));
    return success();
  }
};

/// The linalg.add of the combine's result and another tensor of its type
/// (the shared expert's output) where that is the result's only use.
linalg::AddOp sharedAddOf(CombineOp op) {
  if (!op->hasOneUse())
    return nullptr;
  OpOperand &use = *op->getUses().begin();
  auto add = dyn_cast<linalg::AddOp>(use.getOwner());
  // The add's init is not read: the combine must be one of its inputs.
  if (!add || !add.isDpsInput(&use) || !add.hasPureTensorSemantics() ||
      add->getResult(0).getType() != op.getType() ||
      !llvm::all_of(add.getDpsInputs(), [&](Value in) { return in.getType() == op.getType(); }))
    return nullptr;
  return add;
}

struct CombineToGPU : OpRewritePattern<CombineOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(CombineOp op, PatternRewriter &rewriter) const override {
    RankedTensorType outType = op.getExpertOut().getType();
    RankedTensorType slotType = op.getSlot().getType();
    if (outType.isDynamicDim(1) || slotType.isDynamicDim(1))
      return rewriter.notifyMatchFailure(op, "static H and k");
    Type element = op.getType().getElementType();
    const int64_t hidden = outType.getDimSize(1), topK = slotType.getDimSize(1);
    const int64_t width = runOf(element, hidden);
    if (outType.getElementType() != element)
      return rewriter.notifyMatchFailure(op, "expert rows of the result's type");
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    RunBuilder u{{b, loc}};
    // The shared expert's output joins the sum before it is rounded; the
    // kernel goes where the add was (after both).
    linalg::AddOp add = sharedAddOf(op);
    if (add)
      rewriter.setInsertionPoint(add);
    Value tokens = tensor::DimOp::create(b, loc, op.getSlot(), 0);
    Value expertOut = readBuffer(b, loc, op.getExpertOut());
    Value slot = readBuffer(b, loc, op.getSlot());
    Value weights = readBuffer(b, loc, op.getWeights());
    Value addend;
    if (add) {
      Value other =
          add.getDpsInputs()[0] == op.getResult() ? add.getDpsInputs()[1] : add.getDpsInputs()[0];
      addend = readBuffer(b, loc, other);
    }
    Value out = memref::AllocOp::create(
        b, loc, MemRefType::get({ShapedType::kDynamic, hidden}, element), ValueRange{tokens});
    u.launchRuns(tokens, hidden / width, width, [&](Value token, Value col) {
      auto type = VectorType::get({width}, element);
      auto f32Type = VectorType::get({width}, b.getF32Type());
      // Every choice's row is loaded before the sum (a negative slot
      // reads row 0 and adds nothing), so that the loads are in flight
      // together.
      SmallVector<Value> taken, rows;
      for (int64_t j = 0; j < topK; ++j) {
        Value s = u.load(slot, {token, u.idx(j)});
        taken.push_back(u.cmp(arith::CmpIPredicate::sge, s, u.i32(0)));
        Value safe = arith::SelectOp::create(b, loc, taken.back(), s, u.i32(0));
        rows.push_back(u.load(expertOut, {u.toIndex(safe), col}, type));
      }
      Value sum = arith::ConstantOp::create(b, loc, b.getZeroAttr(f32Type));
      if (addend)
        sum = u.toF32(u.load(addend, {token, col}, type));
      for (int64_t j = 0; j < topK; ++j) {
        Value weight =
            vector::BroadcastOp::create(b, loc, f32Type, u.load(weights, {token, u.idx(j)}));
        Value next = arith::AddFOp::create(b, loc, sum,
                                           arith::MulFOp::create(b, loc, weight, u.toF32(rows[j])));
        sum = arith::SelectOp::create(b, loc, taken[j], next, sum);
      }
      u.storeRun(u.fromF32(sum, element), out, {token, col});
    });
    if (!add) {
      rewriter.replaceOp(op, u.asTensor(out, op.getResult()));
      return success();
    }
    rewriter.replaceOp(add, u.asTensor(out, add->getResult(0)));
    rewriter.eraseOp(op);
    return success();
  }
};
} // namespace

Value mlir::moe::swiglu(OpBuilder &b, Location loc, Value gate, Value up) {
  return arith::MulFOp::create(b, loc, arith::MulFOp::create(b, loc, gate, sigmoid(b, loc, gate)),
                               up);
}

Value mlir::moe::clampedSwiglu(OpBuilder &b, Location loc, Value gate, Value up, float alpha,
                               float limit) {
  auto f32 = [&](float v) -> Value {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  };
  Value g = arith::MinimumFOp::create(b, loc, gate, f32(limit));
  Value p = arith::MaximumFOp::create(b, loc, arith::MinimumFOp::create(b, loc, up, f32(limit)),
                                      f32(-limit));
  Value glu = arith::MulFOp::create(b, loc, g,
                                    sigmoid(b, loc, arith::MulFOp::create(b, loc, g, f32(alpha))));
  return arith::MulFOp::create(b, loc, glu, arith::AddFOp::create(b, loc, p, f32(1.0f)));
}

void mlir::moe::buildActivationKernel(OpBuilder &b, Location loc, ActivationOp op, Value input,
                                      Value out, Value rows, Value offsets, int64_t experts) {
  Type element = cast<MemRefType>(out.getType()).getElementType();
  const int64_t half = cast<MemRefType>(out.getType()).getDimSize(1);
  const int64_t width = runOf(element, half);
  RunBuilder u{{b, loc}};
  auto body = [&](Value row, Value col) {
    auto type = VectorType::get({width}, element);
    Value gate = u.toF32(u.load(input, {row, col}, type));
    Value up = u.toF32(u.load(input, {row, u.add(col, u.idx(half))}, type));
    u.storeRun(u.fromF32(activate(u, op, gate, up, width), element), out, {row, col});
  };
  if (offsets)
    u.launchRunsOfUsedRows(offsets, experts, half / width, width, body);
  else
    u.launchRuns(rows, half / width, width, body);
}

void mlir::moe::populateElementwiseToGPUPatterns(RewritePatternSet &patterns) {
  patterns.add<ActivationToGPU, CombineToGPU>(patterns.getContext());
}
