//===- GPUHostABI.cpp - device buffers, one workspace, the caller's stream ===//
#include "moe/Conversion/Passes.h"
#include "moe/Dialect/MoE/IR/MoEDialect.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"

#include <functional>

namespace mlir::moe {
#define GEN_PASS_DEF_MOEGPUHOSTABI
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;

namespace {
/// Every buffer starts at a multiple of this many bytes of the workspace
/// (cudaMalloc's alignment; enough for 128-bit vector accesses).
constexpr int64_t kBufferAlignment = 256;

/// How a `memref.dim` of a function argument is materialized: in the entry
/// itself (the dim op), or in the size function (a constant, or its
/// `tokens` argument for a dynamic extent).
using ArgumentDim =
    std::function<FailureOr<Value>(OpBuilder &, Location, BlockArgument, int64_t)>;

/// Recomputes `size`, an index computed from the entry's argument shapes, at
/// the builder's insertion point; where it depends on anything else (a
/// chunk loop's induction variable, this rank's index), an upper bound of
/// it from the arithmetic of sizes, all nonnegative: a minimum is at most
/// each of its bounded operands (a chunk's rows, min(T - offset, chunk), at
/// most the chunk), a difference at most its first operand's bound less an
/// exact second operand (or less nothing), sums, maxima and selects at
/// most those of their operands' bounds, products and quotients too where
/// the exact factor or divisor is a nonnegative (positive) constant.
/// Fails at the op that leaves a size without a bound.
class SizeMaterializer {
public:
  SizeMaterializer(Block &entry, ArgumentDim argumentDim)
      : entry(entry), argumentDim(argumentDim) {}

  /// `size`, or an upper bound of it.
  FailureOr<Value> materialize(OpBuilder &b, Value size, Operation *user) {
    return reported(boundOf(b, size, user));
  }

  /// Extent `index` of `buffer`, or an upper bound of it, through the
  /// view-like ops that bufferization leaves between an argument or an
  /// allocation and its users.
  FailureOr<Value> dimOf(OpBuilder &b, Location loc, Value buffer, int64_t index,
                         Operation *user) {
    return reported(dimBoundOf(b, loc, buffer, index, user));
  }

private:
  /// A recomputed size; `exact` where it is the size itself, not a bound.
  struct Bound {
    Value value;
    bool exact;
  };

  FailureOr<Value> reported(FailureOr<Bound> bound) {
    if (succeeded(bound))
      return bound->value;
    if (!blamed) // argumentDim said why
      return failure();
    blamed->emitError("moe-gpu-host-abi: a buffer's size depends on ")
        << why << "; the workspace is sized on the host from argument shapes";
    return failure();
  }

  FailureOr<Bound> boundOf(OpBuilder &b, Value size, Operation *user) {
    auto known = bounds.find(size);
    if (known != bounds.end())
      return known->second;
    // A bound found past an operand without one (a minimum) forgets why
    // that operand had none.
    Operation *blamedBefore = blamed;
    std::string whyBefore = why;
    FailureOr<Bound> bound = computeBound(b, size, user);
    if (succeeded(bound)) {
      bounds[size] = *bound;
      blamed = blamedBefore;
      why = whyBefore;
    }
    return bound;
  }

  FailureOr<Bound> computeBound(OpBuilder &b, Value size, Operation *user) {
    if (isa<BlockArgument>(size))
      return blame(user, "a loop's or block's argument, without a bound");
    Operation *op = size.getDefiningOp();
    Location loc = op->getLoc();
    if (auto dim = dyn_cast<memref::DimOp>(op)) {
      std::optional<int64_t> index = dim.getConstantIndex();
      if (!index)
        return blame(op, "a dimension whose index is not a constant");
      return dimBoundOf(b, loc, dim.getSource(), *index, op);
    }
    if (!isa<arith::ArithDialect, affine::AffineDialect>(op->getDialect()) ||
        op->getNumRegions() != 0)
      return blame(op, "an operation other than arithmetic on shapes");
    if (auto select = dyn_cast<arith::SelectOp>(op))
      return selectBound(b, select);
    SmallVector<FailureOr<Bound>> operands;
    for (Value operand : op->getOperands())
      operands.push_back(boundOf(b, operand, op));
    auto all = [&](auto pred) { return llvm::all_of(operands, pred); };
    auto bounded = [](const FailureOr<Bound> &o) { return succeeded(o); };
    if (all([](const FailureOr<Bound> &o) { return succeeded(o) && o->exact; })) {
      IRMapping exact;
      for (auto [operand, bound] : llvm::zip(op->getOperands(), operands))
        exact.map(operand, bound->value);
      Operation *clone = b.clone(*op, exact);
      return Bound{clone->getResult(cast<OpResult>(size).getResultNumber()), true};
    }
    auto clone = [&](ArrayRef<Value> values) -> Bound {
      IRMapping mapping;
      mapping.map(op->getOperands(), values);
      return Bound{b.clone(*op, mapping)->getResult(0), false};
    };
    auto valueOf = [](const FailureOr<Bound> &o) { return o->value; };
    if (isa<arith::MinUIOp, arith::MinSIOp>(op)) {
      if (succeeded(operands[0]) && succeeded(operands[1]))
        return clone({valueOf(operands[0]), valueOf(operands[1])});
      for (FailureOr<Bound> &operand : operands)
        if (succeeded(operand))
          return Bound{operand->value, false};
      return failure(); // neither has a bound
    }
    // A bound times, or divided by, an exact operand stays a bound only for
    // a constant that is not negative (positive for a divisor).
    auto constantAtLeast = [](const FailureOr<Bound> &o, int64_t least) {
      APInt value;
      return succeeded(o) && o->exact && matchPattern(o->value, m_ConstantInt(&value)) &&
             value.getSExtValue() >= least;
    };
    auto factor = [&](const FailureOr<Bound> &o) {
      return succeeded(o) && (!o->exact || constantAtLeast(o, 0));
    };
    if (isa<arith::MaxUIOp, arith::MaxSIOp, arith::AddIOp>(op) && all(bounded))
      return clone({valueOf(operands[0]), valueOf(operands[1])});
    if (isa<arith::MulIOp>(op) && factor(operands[0]) && factor(operands[1]))
      return clone({valueOf(operands[0]), valueOf(operands[1])});
    // A size less another is at most the first (sizes are not negative).
    if (isa<arith::SubIOp>(op) && succeeded(operands[0])) {
      if (succeeded(operands[1]) && operands[1]->exact)
        return clone({valueOf(operands[0]), valueOf(operands[1])});
      return Bound{operands[0]->value, false};
    }
    if (isa<arith::DivUIOp, arith::CeilDivUIOp, arith::DivSIOp, arith::CeilDivSIOp,
            arith::FloorDivSIOp>(op) &&
        succeeded(operands[0]) && constantAtLeast(operands[1], 1))
      return clone({valueOf(operands[0]), valueOf(operands[1])});
    if (isa<arith::IndexCastOp, arith::IndexCastUIOp>(op) && succeeded(operands[0]))
      return clone({valueOf(operands[0])});
    for (FailureOr<Bound> &operand : operands)
      if (failed(operand))
        return failure(); // the operand's reason
    return blame(op, "arithmetic that keeps no bound of its operands' bounds");
  }

  /// The select itself where its condition and values are exact, else the
  /// larger of its values' bounds (the condition is no size: why it has no
  /// bound is not the select's reason).
  FailureOr<Bound> selectBound(OpBuilder &b, arith::SelectOp select) {
    Operation *blamedBefore = blamed;
    std::string whyBefore = why;
    FailureOr<Bound> condition = boundOf(b, select.getCondition(), select);
    blamed = blamedBefore;
    why = whyBefore;
    FailureOr<Bound> yes = boundOf(b, select.getTrueValue(), select);
    FailureOr<Bound> no = boundOf(b, select.getFalseValue(), select);
    if (failed(yes) || failed(no))
      return failure();
    if (succeeded(condition) && condition->exact && yes->exact && no->exact)
      return Bound{
          arith::SelectOp::create(b, select.getLoc(), condition->value, yes->value, no->value),
          true};
    return Bound{arith::MaxUIOp::create(b, select.getLoc(), yes->value, no->value), false};
  }

  FailureOr<Bound> dimBoundOf(OpBuilder &b, Location loc, Value buffer, int64_t index,
                              Operation *user) {
    auto type = cast<MemRefType>(buffer.getType());
    if (!type.isDynamicDim(index))
      return Bound{arith::ConstantIndexOp::create(b, loc, type.getDimSize(index)), true};
    if (auto argument = dyn_cast<BlockArgument>(buffer)) {
      if (argument.getOwner() != &entry)
        return blame(user, "the shape of a loop's or block's argument");
      FailureOr<Value> extent = argumentDim(b, loc, argument, index);
      if (failed(extent)) {
        // argumentDim said why; nothing else is to be reported.
        blamed = nullptr;
        why.clear();
        return failure();
      }
      return Bound{*extent, true};
    }
    Operation *op = buffer.getDefiningOp();
    if (auto alloc = dyn_cast<memref::AllocOp>(op))
      return boundOf(b, alloc.getDynamicSizes()[type.getDynamicDimIndex(index)], op);
    // An allocation this pass has already made a view of the workspace.
    if (auto view = dyn_cast<memref::ViewOp>(op))
      return boundOf(b, view.getSizes()[type.getDynamicDimIndex(index)], op);
    if (auto expand = dyn_cast<memref::ExpandShapeOp>(op))
      return ofFoldResult(b, loc, expand.getMixedOutputShape()[index], op);
    if (auto subview = dyn_cast<memref::SubViewOp>(op)) {
      // A rank-reducing subview drops unit extents: count the kept ones.
      llvm::SmallBitVector dropped = subview.getDroppedDims();
      SmallVector<OpFoldResult> sizes = subview.getMixedSizes();
      for (int64_t i = 0, kept = 0, e = sizes.size(); i < e; ++i) {
        if (dropped.test(i))
          continue;
        if (kept++ == index)
          return ofFoldResult(b, loc, sizes[i], op);
      }
    }
    if (auto collapse = dyn_cast<memref::CollapseShapeOp>(op)) {
      Bound product{arith::ConstantIndexOp::create(b, loc, 1), true};
      // The indices by value: a range over an element of the returned
      // temporary would outlive it.
      SmallVector<ReassociationIndices> groups = collapse.getReassociationIndices();
      for (int64_t source : groups[index]) {
        FailureOr<Bound> extent = dimBoundOf(b, loc, collapse.getSrc(), source, op);
        if (failed(extent))
          return failure();
        product = {arith::MulIOp::create(b, loc, product.value, extent->value),
                   product.exact && extent->exact};
      }
      return product;
    }
    if (auto cast = dyn_cast<memref::CastOp>(op))
      return dimBoundOf(b, loc, cast.getSource(), index, op);
    return blame(op, "the shape of a buffer this pass cannot trace");
  }

  FailureOr<Bound> ofFoldResult(OpBuilder &b, Location loc, OpFoldResult size,
                                Operation *user) {
    if (auto attr = dyn_cast<Attribute>(size))
      return Bound{arith::ConstantIndexOp::create(b, loc, cast<IntegerAttr>(attr).getInt()),
                   true};
    return boundOf(b, cast<Value>(size), user);
  }

  /// Notes the first reason a size has no bound; reported() emits it.
  FailureOr<Bound> blame(Operation *op, StringRef what) {
    if (!blamed) {
      blamed = op;
      why = what.str();
    }
    return failure();
  }

  Block &entry;
  ArgumentDim argumentDim;
  DenseMap<Value, Bound> bounds;
  Operation *blamed = nullptr;
  std::string why;
};

/// Bytes of one element, or nullopt for types a workspace view cannot hold.
std::optional<int64_t> elementBytes(Type type) {
  if (type.isIndex())
    return 8;
  if (type.isIntOrFloat())
    return (type.getIntOrFloatBitWidth() + 7) / 8;
  return std::nullopt;
}

/// Advances a byte offset past buffers, each rounded up to the alignment.
struct Aligner {
  Aligner(OpBuilder &b, Location loc)
      : minusOne(arith::ConstantIndexOp::create(b, loc, kBufferAlignment - 1)),
        mask(arith::ConstantIndexOp::create(b, loc, -kBufferAlignment)) {}

  Value advance(OpBuilder &b, Location loc, Value offset, Value bytes) const {
    Value padded = arith::AddIOp::create(b, loc, bytes, minusOne);
    return arith::AddIOp::create(b, loc, offset, arith::AndIOp::create(b, loc, padded, mask));
  }

  Value minusOne, mask;
};

/// The aligned byte offsets of `allocs` in the workspace and the total,
/// computed at the builder's insertion point.
FailureOr<std::pair<SmallVector<Value>, Value>>
layOut(OpBuilder &b, Location loc, ArrayRef<memref::AllocOp> allocs,
       SizeMaterializer &sizes) {
  SmallVector<Value> offsets;
  Value offset = arith::ConstantIndexOp::create(b, loc, 0);
  Aligner aligner(b, loc);
  for (memref::AllocOp alloc : allocs) {
    MemRefType type = alloc.getType();
    std::optional<int64_t> bytes = elementBytes(type.getElementType());
    if (!bytes || !type.getLayout().isIdentity() || type.getMemorySpace())
      return alloc.emitError("moe-gpu-host-abi: a workspace buffer needs an "
                             "integer or float element and the identity layout, got ")
             << type;
    Value size = arith::ConstantIndexOp::create(b, loc, *bytes);
    for (int64_t i = 0; i < type.getRank(); ++i) {
      FailureOr<Value> extent = sizes.dimOf(b, loc, alloc, i, alloc);
      if (failed(extent))
        return failure();
      size = arith::MulIOp::create(b, loc, size, *extent);
    }
    offsets.push_back(offset);
    offset = aligner.advance(b, loc, offset, size);
  }
  return std::make_pair(offsets, offset);
}

struct MoEGPUHostABIPass : moe::impl::MoEGPUHostABIBase<MoEGPUHostABIPass> {
  void runOnOperation() override {
    SmallVector<func::FuncOp> entries;
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal())
        entries.push_back(func);
    for (func::FuncOp func : entries) {
      if (!func.isPublic()) {
        func.emitError("moe-gpu-host-abi: a private function with a body would "
                       "need its own workspace; the GPU target supports entries only");
        return signalPassFailure();
      }
      if (failed(convert(func)))
        return signalPassFailure();
    }
  }

  LogicalResult convert(func::FuncOp func) {
    if (!func.getBody().hasOneBlock())
      return func.emitError("moe-gpu-host-abi: an entry with several blocks");
    // Runtime entries that take buffers must take device buffers and the
    // stream (convert-moe-to-runtime{into-buffers}); the others read and
    // write host buffers. Scalar ones (moert_agree_max) are fine.
    WalkResult calls = func.walk([&](func::CallOp call) {
      auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(call, call.getCalleeAttr());
      auto isBuffer = [](Type t) { return isa<ShapedType>(t); };
      bool takesBuffers = llvm::any_of(call.getOperandTypes(), isBuffer) ||
                          llvm::any_of(call.getResultTypes(), isBuffer);
      if (callee && callee.isExternal() && takesBuffers &&
          !call->hasAttr(moe::kStreamOperand)) {
        call.emitError("moe-gpu-host-abi: ")
            << call.getCallee()
            << " takes host buffers (a runtime call without a stream operand: "
               "convert-moe-to-runtime{into-buffers} makes the GPU's)";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (calls.wasInterrupted())
      return failure();
    Block &body = func.getBody().front();
    OpBuilder b(func.getContext());
    Location loc = func.getLoc();
    if (failed(resultsToOutParameters(func, b)))
      return failure();

    // Copies become kernels; a buffer copied onto itself needs none.
    SmallVector<memref::CopyOp> copies;
    func.walk([&](memref::CopyOp copy) { copies.push_back(copy); });
    for (memref::CopyOp copy : copies) {
      b.setInsertionPoint(copy);
      if (copy.getSource() != copy.getTarget())
        linalg::CopyOp::create(b, copy.getLoc(), copy.getSource(), copy.getTarget());
      copy.erase();
    }

    SmallVector<memref::AllocOp> allocs;
    func.walk([&](memref::AllocOp alloc) { allocs.push_back(alloc); });
    Type bytes = MemRefType::get({ShapedType::kDynamic}, b.getI8Type());
    unsigned workspaceIndex = func.getNumArguments();
    if (failed(func.insertArgument(
            workspaceIndex, bytes,
            b.getDictionaryAttr({b.getNamedAttr(moe::kGpuWrittenArg, b.getUnitAttr()),
                                 b.getNamedAttr(moe::kArgumentName, b.getStringAttr("workspace"))}),
            loc)) ||
        failed(func.insertArgument(
            workspaceIndex + 1, LLVM::LLVMPointerType::get(b.getContext()),
            b.getDictionaryAttr(b.getNamedAttr(moe::kGpuStreamArg, b.getUnitAttr())), loc)))
      return func.emitError("moe-gpu-host-abi: cannot add the workspace and stream arguments");
    Value workspace = body.getArgument(workspaceIndex);
    // Runtime calls (the expert-parallel exchange) work on the same stream.
    // To them a null stream means host buffers (CPU layers), so the legacy
    // default stream, null to CUDA, goes as its other name,
    // CU_STREAM_LEGACY (0x1).
    Value stream = body.getArgument(workspaceIndex + 1);
    SmallVector<func::CallOp> onStream;
    func.walk([&](func::CallOp call) {
      if (call->hasAttr(moe::kStreamOperand))
        onStream.push_back(call);
    });
    if (!onStream.empty()) {
      b.setInsertionPointToStart(&body);
      Type pointer = stream.getType();
      Value isNull = LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::eq, stream,
                                          LLVM::ZeroOp::create(b, loc, pointer));
      Value one = LLVM::ConstantOp::create(b, loc, b.getI64Type(), 1).getResult();
      Value legacy = LLVM::IntToPtrOp::create(b, loc, pointer, one);
      Value runtimeStream = LLVM::SelectOp::create(b, loc, isNull, legacy, stream);
      for (func::CallOp call : onStream)
        call->setOperand(call.getNumOperands() - 1, runtimeStream);
    }

    b.setInsertionPointToStart(&body);
    SizeMaterializer inEntry(body, [](OpBuilder &b, Location loc, BlockArgument argument,
                                      int64_t index) -> FailureOr<Value> {
      return Value(memref::DimOp::create(b, loc, argument, index));
    });
    auto layout = layOut(b, loc, allocs, inEntry);
    if (failed(layout))
      return failure();
    auto [offsets, total] = *layout;
    Value available = memref::DimOp::create(b, loc, workspace, 0);
    cf::AssertOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ule, total, available),
        (func.getSymName() + ": the workspace is smaller than " + func.getSymName() +
         "_workspace_bytes(tokens)")
            .str());
    for (auto [alloc, offset] : llvm::zip(allocs, offsets)) {
      b.setInsertionPoint(alloc);
      Value view = memref::ViewOp::create(b, alloc.getLoc(), alloc.getType(), workspace,
                                          offset, alloc.getDynamicSizes());
      alloc.replaceAllUsesWith(view);
      alloc.erase();
    }
    SmallVector<memref::DeallocOp> deallocs;
    func.walk([&](memref::DeallocOp dealloc) { deallocs.push_back(dealloc); });
    for (memref::DeallocOp dealloc : deallocs)
      dealloc.erase();
    return buildWorkspaceBytes(func, workspaceIndex);
  }

  /// Returned buffers become trailing arguments that the caller owns
  /// (named `y` for a single result, as the layer's output). The entry
  /// checks that each has the extents of the buffer it replaces: kernels
  /// sized by the call's tokens would write past a shorter one.
  LogicalResult resultsToOutParameters(func::FuncOp func, OpBuilder &b) {
    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    const bool single = ret.getNumOperands() == 1;
    for (auto [i, result] : llvm::enumerate(ret.getOperands())) {
      auto type = dyn_cast<MemRefType>(result.getType());
      if (!type)
        return func.emitError("moe-gpu-host-abi: result ")
               << i << " is not a buffer; GPU entries return buffers only";
      unsigned index = func.getNumArguments();
      SmallVector<NamedAttribute> attrs{b.getNamedAttr(moe::kGpuWrittenArg, b.getUnitAttr())};
      if (single)
        attrs.push_back(b.getNamedAttr(moe::kArgumentName, b.getStringAttr("y")));
      if (failed(func.insertArgument(index, type, b.getDictionaryAttr(attrs), func.getLoc())))
        return func.emitError("moe-gpu-host-abi: cannot add an out-parameter");
      Value out = func.getArgument(index);
      auto alloc = result.getDefiningOp<memref::AllocOp>();
      bool replaced = alloc && alloc.getType() == type;
      b.setInsertionPoint(replaced ? alloc.getOperation() : ret.getOperation());
      SmallVector<Value> extents; // of the dynamic dimensions
      for (int64_t d = 0; d < type.getRank(); ++d)
        if (type.isDynamicDim(d))
          extents.push_back(replaced ? alloc.getDynamicSizes()[extents.size()]
                                     : memref::DimOp::create(b, ret.getLoc(), result, d));
      if (replaced) // as early as the extents allow: before any launch, usually
        b.setInsertionPoint(earliestPointFor(extents, alloc));
      checkExtents(b, func, out, extents, single ? "y" : "output " + std::to_string(i));
      if (replaced) {
        alloc.replaceAllUsesWith(out);
        alloc.erase();
        continue;
      }
      b.setInsertionPoint(ret);
      linalg::CopyOp::create(b, ret.getLoc(), result, out);
    }
    ret->setOperands({});
    func.setFunctionType(
        FunctionType::get(func.getContext(), func.getArgumentTypes(), {}));
    return success();
  }

  /// The first point of `user`'s block where every value of `values` is
  /// defined (where they are all defined in that block or are its
  /// arguments), else `user`.
  static Operation *earliestPointFor(ArrayRef<Value> values, Operation *user) {
    Block *block = user->getBlock();
    Operation *point = &block->front();
    for (Value v : values) {
      if (isa<BlockArgument>(v) && v.getParentBlock() == block)
        continue;
      Operation *def = v.getDefiningOp();
      if (!def || def->getBlock() != block)
        return user;
      if (point->isBeforeInBlock(def) || point == def)
        point = def->getNextNode();
    }
    return point;
  }

  /// Asserts that `out`'s dynamic extents are `extents`.
  static void checkExtents(OpBuilder &b, func::FuncOp func, Value out, ArrayRef<Value> extents,
                           const std::string &name) {
    auto type = cast<MemRefType>(out.getType());
    Location loc = out.getLoc();
    Value fits;
    for (int64_t d = 0, k = 0; d < type.getRank(); ++d) {
      if (!type.isDynamicDim(d))
        continue;
      Value same = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                         memref::DimOp::create(b, loc, out, d), extents[k++]);
      fits = fits ? arith::AndIOp::create(b, loc, fits, same).getResult() : same;
    }
    if (!fits)
      return;
    std::string shape;
    llvm::raw_string_ostream os(shape);
    llvm::interleaveComma(type.getShape(), os, [&](int64_t d) {
      if (ShapedType::isDynamic(d))
        os << "T";
      else
        os << d;
    });
    cf::AssertOp::create(b, loc, fits,
                         (func.getSymName() + ": " + name + " must have the shape [" + shape +
                          "] the call computes, T its token count (the rows of x)")
                             .str());
  }

  /// `<entry>_workspace_bytes(tokens) -> index`, where `tokens` is every
  /// dynamic extent of the entry's buffer arguments (the rows of x and of
  /// the output).
  LogicalResult buildWorkspaceBytes(func::FuncOp entry, unsigned workspaceIndex) {
    SmallVector<memref::ViewOp> views;
    entry.walk([&](memref::ViewOp view) {
      if (view.getSource() == entry.getArgument(workspaceIndex))
        views.push_back(view);
    });
    OpBuilder b(entry);
    Location loc = entry.getLoc();
    b.setInsertionPointAfter(entry);
    auto func = func::FuncOp::create(
        b, loc, (entry.getSymName() + "_workspace_bytes").str(),
        b.getFunctionType({b.getIndexType()}, {b.getIndexType()}));
    Block *body = func.addEntryBlock();
    b.setInsertionPointToStart(body);
    Value tokens = body->getArgument(0);
    Block &entryBlock = entry.getBody().front();
    SizeMaterializer sizes(entryBlock, [&](OpBuilder &b, Location loc, BlockArgument argument,
                                           int64_t index) -> FailureOr<Value> {
      if (index != 0) {
        emitError(loc, "moe-gpu-host-abi: argument ")
            << argument.getArgNumber()
            << " has a dynamic extent other than its rows; only the token count may vary";
        return failure();
      }
      return tokens;
    });
    // The size function lays out the same buffers in the same order: the
    // views' result types and sizes are the allocations'.
    Value total = arith::ConstantIndexOp::create(b, loc, 0);
    Aligner aligner(b, loc);
    for (memref::ViewOp view : views) {
      MemRefType type = view.getType();
      Value size = arith::ConstantIndexOp::create(b, loc, *elementBytes(type.getElementType()));
      unsigned dynamic = 0;
      for (int64_t i = 0; i < type.getRank(); ++i) {
        Value extent;
        if (!type.isDynamicDim(i)) {
          extent = arith::ConstantIndexOp::create(b, loc, type.getDimSize(i));
        } else {
          FailureOr<Value> computed = sizes.materialize(b, view.getSizes()[dynamic++], view);
          if (failed(computed))
            return failure();
          extent = *computed;
        }
        size = arith::MulIOp::create(b, loc, size, extent);
      }
      total = aligner.advance(b, loc, total, size);
    }
    func::ReturnOp::create(b, loc, total);
    return success();
  }
};
} // namespace
