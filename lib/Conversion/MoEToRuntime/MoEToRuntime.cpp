//===- MoEToRuntime.cpp - cross-rank moe ops to libmoert calls ------------===//
#include "Fingerprint.h"
#include "QuantizeRows.h"
#include "moe/Conversion/Passes.h"
#include "moe/Dialect/MoE/IR/MoEOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
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
/// On an all-gather dispatch's call: its slots, which its combine needs.
constexpr llvm::StringLiteral kGatherSlots = "moe.gather_slots";

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

/// The runtime entry `name` of type `type`, declared (private) in the symbol
/// table that holds `op` unless it is declared there already. An existing
/// symbol of that name is reused only if it is a func.func declaration (no
/// body) of exactly `type`; it then gets the calling convention the runtime
/// implements (`llvm.emit_c_interface` for entries that take tensors, plain C
/// for scalar ones). Anything else — another op, a defined function (such as
/// the layer's own function named like the entry), another type — is an
/// error at `op` with a note at the symbol, not a call that cannot verify.
FailureOr<func::FuncOp> declare(Operation *op, StringRef name, FunctionType type,
                                bool cInterface = true) {
  Operation *table = SymbolTable::getNearestSymbolTable(op);
  if (!table || table->getNumRegions() != 1 || !table->getRegion(0).hasOneBlock())
    return op->emitOpError("convert-moe-to-runtime: no symbol table with one "
                           "block holds this op, so @")
           << name << " cannot be declared";
  func::FuncOp func;
  if (Operation *existing = SymbolTable::lookupSymbolIn(table, name)) {
    func = dyn_cast<func::FuncOp>(existing);
    const char *why = nullptr;
    if (!func)
      why = "is not a func.func";
    else if (!func.isExternal())
      why = "is a defined function, not a declaration";
    else if (func.getFunctionType() != type)
      why = "is declared with another type";
    if (why) {
      InFlightDiagnostic diag = op->emitOpError()
                                << "convert-moe-to-runtime: the runtime entry @" << name
                                << " of type " << type << " is needed, but the symbol @"
                                << name << " " << why;
      diag.attachNote(existing->getLoc()) << "the conflicting symbol";
      return diag;
    }
  } else {
    OpBuilder b = OpBuilder::atBlockBegin(&table->getRegion(0).front());
    func = func::FuncOp::create(b, table->getLoc(), name, type);
    func.setPrivate();
  }
  if (cInterface)
    func->setAttr("llvm.emit_c_interface", UnitAttr::get(op->getContext()));
  else
    func->removeAttr("llvm.emit_c_interface");
  return func;
}

/// A runtime entry's view of `tensor`: a buffer with every extent dynamic,
/// only read by the callee.
Value readBuffer(ImplicitLocOpBuilder &b, Value tensor) {
  auto type = erased(tensor.getType());
  auto memref = MemRefType::get(type.getShape(), type.getElementType());
  return bufferization::ToBufferOp::create(b, memref, castTo(b, tensor, type),
                                           /*read_only=*/true);
}

/// A new buffer of `type`'s shape (`dynamicSizes` for its dynamic extents)
/// for the callee to write, and its view with every extent dynamic.
std::pair<Value, Value> writeBuffer(ImplicitLocOpBuilder &b, RankedTensorType type,
                                    ValueRange dynamicSizes = {}) {
  Value buffer = memref::AllocOp::create(
      b, MemRefType::get(type.getShape(), type.getElementType()), dynamicSizes);
  auto erasedType = MemRefType::get(erased(type).getShape(), type.getElementType());
  return {buffer, memref::CastOp::create(b, erasedType, buffer)};
}

/// The tensor a callee wrote into `buffer`.
Value written(ImplicitLocOpBuilder &b, Value buffer, Type type) {
  auto tensor = bufferization::ToTensorOp::create(
      b, memref::getTensorTypeFromMemRefType(buffer.getType()), buffer, /*restrict=*/true,
      /*writable=*/true);
  return castTo(b, tensor, type);
}

/// The stream operand of a call into buffers: null (host memory) until
/// moe-gpu-host-abi puts the entry's stream there.
Value nullStream(ImplicitLocOpBuilder &b) {
  return LLVM::ZeroOp::create(b, LLVM::LLVMPointerType::get(b.getContext()));
}

/// Calls the runtime entry `name` on `args` and the stream operand, then
/// replaces `op`'s one result by the tensor the call wrote into `buffer`.
LogicalResult callFilling(ImplicitLocOpBuilder &b, Operation *op, StringRef name,
                          SmallVector<Value> args, Value buffer) {
  args.push_back(nullStream(b));
  FailureOr<func::FuncOp> callee =
      declare(op, name, b.getFunctionType(ValueRange(args).getTypes(), {}));
  if (failed(callee))
    return failure();
  func::CallOp::create(b, *callee, args)->setAttr(kStreamOperand, b.getUnitAttr());
  Value result = op->getResult(0);
  result.replaceAllUsesWith(written(b, buffer, result.getType()));
  op->erase();
  return success();
}

struct ConvertMoEToRuntimePass
    : moe::impl::ConvertMoEToRuntimeBase<ConvertMoEToRuntimePass> {
  using Base::Base;

  /// Each packed dispatch's call (pack-in-layer) and the slot map of its
  /// token rows, which its combine sums by.
  DenseMap<Operation *, Value> packedSlots;

  /// The plans' MOERT_PLAN_LAYER field (0: the option is off): the
  /// module's moe.fingerprint (moe-fingerprint, which the pipelines run
  /// before any machine-dependent decision), else a hash of the module as it
  /// was before this pass. Ranks that run libraries built from different
  /// configs fail on it together, even where their collectives match. The
  /// module's, not a function's: a library's phase variants share it, so
  /// that a rank in another phase is named as such.
  int64_t layerFingerprint = 0;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if ((allGatherSlots || packInLayer) && !intoBuffers) {
      module.emitError("convert-moe-to-runtime: all-gather-slots and pack-in-layer fill the "
                       "layer's buffers: they need into-buffers");
      return signalPassFailure();
    }
    // The stored fingerprint is used up here. Printing the module costs;
    // only plans carry the fingerprint.
    auto stored = module->getAttrOfType<IntegerAttr>(kFingerprintAttr);
    module->removeAttr(kFingerprintAttr);
    if (fingerprint && stored)
      layerFingerprint = stored.getInt() ? stored.getInt() : 1;
    else if (fingerprint &&
             module.walk([](EpDispatchOp) { return WalkResult::interrupt(); }).wasInterrupted())
      layerFingerprint = fingerprintOf(module);
    // Each lowering erases its op; a failed one stops the walk.
    auto lowerAll = [&](auto lower) {
      return !module.walk(lower).wasInterrupted();
    };
    auto step = [](LogicalResult r) {
      return failed(r) ? WalkResult::interrupt() : WalkResult::advance();
    };
    if (!lowerAll([&](EpDispatchOp op) { return step(lowerDispatch(op)); }) ||
        !lowerAll([&](EpCombineOp op) { return step(lowerCombine(op)); }) ||
        !lowerAll([&](AgreeCountOp op) { return step(lowerAgreeCount(op)); }) ||
        !lowerAll([&](TpSliceOp op) { return step(lowerTpSlice(op)); }) ||
        !lowerAll([&](TpGatherOp op) { return step(lowerTpGather(op)); }))
      signalPassFailure();
  }

  /// Rows [j*c, min((j+1)*c, T)) of x, c = ceil(T / tp), j = rank % tp.
  LogicalResult lowerTpSlice(TpSliceOp op) {
    ImplicitLocOpBuilder b(op.getLoc(), op);
    FailureOr<func::FuncOp> rankFn = declare(
        op, "moert_rank", b.getFunctionType({}, {b.getI32Type()}), /*cInterface=*/false);
    if (failed(rankFn))
      return failure();
    Value rank = func::CallOp::create(b, *rankFn, ValueRange{}).getResult(0);
    Value tp = arith::ConstantIndexOp::create(b, op.getTp());
    Value index = arith::RemUIOp::create(
        b, arith::IndexCastOp::create(b, b.getIndexType(), rank), tp);
    Value tokens = tensor::DimOp::create(b, op.getX(), 0);
    Value share = arith::CeilDivUIOp::create(b, tokens, tp);
    Value start = arith::MinUIOp::create(b, arith::MulIOp::create(b, index, share), tokens);
    Value size = arith::MinUIOp::create(b, share, arith::SubIOp::create(b, tokens, start));
    SmallVector<OpFoldResult> offsets = {start, b.getIndexAttr(0)};
    SmallVector<OpFoldResult> sizes = {size, tensor::getMixedSize(b, b.getLoc(), op.getX(), 1)};
    SmallVector<OpFoldResult> strides = {b.getIndexAttr(1), b.getIndexAttr(1)};
    auto rows = op.getX().getType().clone(
        {ShapedType::kDynamic, op.getX().getType().getDimSize(1)});
    Value slice = tensor::ExtractSliceOp::create(b, rows, op.getX(), offsets, sizes, strides);
    op.getSlice().replaceAllUsesWith(castTo(b, slice, op.getType()));
    op.erase();
    return success();
  }

  /// The gather into a buffer of the full tensor's rows.
  LogicalResult lowerTpGatherInto(TpGatherOp op) {
    ImplicitLocOpBuilder b(op.getLoc(), op);
    auto type = cast<RankedTensorType>(op.getType());
    Value rows = tensor::DimOp::create(b, op.getFull(), 0);
    SmallVector<Value> dynamicSizes;
    if (type.isDynamicDim(0))
      dynamicSizes.push_back(rows);
    auto [buffer, view] = writeBuffer(b, type, dynamicSizes);
    return callFilling(b, op, "moert_tp_gather_into_" + suffix(type),
                       {readBuffer(b, op.getSlice()),
                        arith::IndexCastOp::create(b, b.getI64Type(), rows),
                        arith::ConstantOp::create(b, b.getI64IntegerAttr(op.getTp())), view},
                       buffer);
  }

  LogicalResult lowerTpGather(TpGatherOp op) {
    if (intoBuffers)
      return lowerTpGatherInto(op);
    ImplicitLocOpBuilder b(op.getLoc(), op);
    Value tokens = arith::IndexCastOp::create(
        b, b.getI64Type(), tensor::DimOp::create(b, op.getFull(), 0));
    SmallVector<Value> args = {
        castTo(b, op.getSlice(), erased(op.getSlice().getType())), tokens,
        arith::ConstantOp::create(b, b.getI64IntegerAttr(op.getTp()))};
    Type result = erased(op.getType());
    FailureOr<func::FuncOp> callee =
        declare(op, "moert_tp_gather_" + suffix(op.getType()),
                b.getFunctionType(ValueRange(args).getTypes(), {result}));
    if (failed(callee))
      return failure();
    auto call = func::CallOp::create(b, *callee, args);
    op.getResult().replaceAllUsesWith(castTo(b, call.getResult(0), op.getType()));
    op.erase();
    return success();
  }

  LogicalResult lowerAgreeCount(AgreeCountOp op) {
    ImplicitLocOpBuilder b(op.getLoc(), op);
    auto i64 = b.getI64Type();
    // Scalars only: plain C.
    FailureOr<func::FuncOp> callee = declare(
        op, "moert_agree_max", b.getFunctionType({i64, i64}, {i64}), /*cInterface=*/false);
    if (failed(callee))
      return failure();
    Value local = arith::IndexCastOp::create(b, i64, op.getLocal());
    Value purpose = arith::ConstantOp::create(b, b.getI64IntegerAttr(int64_t(op.getPurpose())));
    Value agreed = func::CallOp::create(b, *callee, ValueRange{local, purpose}).getResult(0);
    op.getAgreed().replaceAllUsesWith(
        arith::IndexCastOp::create(b, b.getIndexType(), agreed).getResult());
    op.erase();
    return success();
  }

  /// The dispatch plan the runtime checks every request against, in the
  /// order of moert.h's MOERT_PLAN_* fields.
  Value buildPlan(ImplicitLocOpBuilder &b, EpDispatchOp op) {
    int64_t quantization = 0;
    if (auto quant = op.getQuantization())
      quantization = int64_t(*quant); // 1 = fp8g128, 2 = fp8g32ue8m0, as in moert.h
    SmallVector<int64_t> fields = {int64_t(op.getCapacity()),
                                   int64_t(op.getMaxTokens().value_or(0)),
                                   int64_t(op.getSlots().value_or(0)), quantization,
                                   int64_t(op.getEp().value_or(0))};
    // moe-plan-buffers' sizes, when it ran; else the runtime derives them.
    auto sizes = op->getAttrOfType<DictionaryAttr>("moe.workspaces");
    for (StringRef name : {"dispatch.send", "dispatch.recv", "expert.rows", "combine.recv"}) {
      auto size = sizes ? dyn_cast_or_null<IntegerAttr>(sizes.get(name)) : IntegerAttr();
      fields.push_back(size ? size.getInt() : 0);
    }
    // The optional fields: the placement's logical experts (0: the runtime
    // infers them from phys_to_log), replica selection (1: per batch), then
    // the layer's fingerprint (0: none).
    if (op.getExperts() || op.getPerBatchReplicas() || layerFingerprint)
      fields.push_back(int64_t(op.getExperts().value_or(0)));
    if (op.getPerBatchReplicas() || layerFingerprint)
      fields.push_back(op.getPerBatchReplicas() ? 1 : 0);
    if (layerFingerprint)
      fields.push_back(layerFingerprint);
    auto type = RankedTensorType::get({int64_t(fields.size())}, b.getI64Type());
    Value plan = arith::ConstantOp::create(
        b, DenseElementsAttr::get(type, ArrayRef<int64_t>(fields)));
    return castTo(b, plan, erased(type));
  }

  /// The rest of an exchange's arguments after its rows: the expert map
  /// (phys_to_log and replica_share, or expert_rank), the plan, a new buffer
  /// for the runtime to fill for each of `outTypes` (returned), and the
  /// stream.
  SmallVector<Value> appendMapPlanAndOuts(ImplicitLocOpBuilder &b, EpDispatchOp op,
                                          SmallVector<Value> &args,
                                          ArrayRef<RankedTensorType> outTypes) {
    if (op.getPhysToLog())
      args.append({readBuffer(b, op.getPhysToLog()), readBuffer(b, op.getReplicaShare())});
    else
      args.push_back(readBuffer(b, op.getExpertRank()));
    args.push_back(readBuffer(b, buildPlan(b, op)));
    SmallVector<Value> outs;
    for (RankedTensorType type : outTypes) {
      auto [buffer, view] = writeBuffer(b, type);
      outs.push_back(buffer);
      args.push_back(view);
    }
    args.push_back(nullStream(b));
    return outs;
  }

  /// The dispatch into buffers this function allocates (static rows):
  /// `moert_ep_dispatch[_placed]_into_<dtype>`, which returns the handle.
  LogicalResult lowerDispatchInto(EpDispatchOp op) {
    auto received = cast<RankedTensorType>(op.getReceived().getType());
    if (ShapedType::isDynamic(received.getDimSize(0)))
      return op.emitOpError("convert-moe-to-runtime{into-buffers}: the received rows "
                            "must be static (slots, or capacity rows from "
                            "moe-decompose-layer{static-received}), got ")
             << received;
    ImplicitLocOpBuilder b(op.getLoc(), op);
    const bool placed = static_cast<bool>(op.getPhysToLog());
    // With received_scales the experts read the FP8 codes as they arrived.
    const bool codes = static_cast<bool>(op.getReceivedScales());
    SmallVector<Value> args = {readBuffer(b, op.getX()), readBuffer(b, op.getExpertIds()),
                               readBuffer(b, op.getExpertWeights())};
    SmallVector<Value> results = {op.getReceived()};
    if (codes)
      results.push_back(op.getReceivedScales());
    results.append({op.getLocalIds(), op.getLocalWeights()});
    SmallVector<RankedTensorType> types;
    for (Value result : results)
      types.push_back(cast<RankedTensorType>(result.getType()));
    SmallVector<Value> outs = appendMapPlanAndOuts(b, op, args, types);
    FailureOr<func::FuncOp> callee =
        declare(op,
                std::string("moert_ep_dispatch_") + (placed ? "placed_" : "") +
                    (codes ? "fp8_" : "") + "into_" + suffix(op.getX().getType()),
                b.getFunctionType(ValueRange(args).getTypes(), {b.getI64Type()}));
    if (failed(callee))
      return failure();
    auto call = func::CallOp::create(b, *callee, args);
    call->setAttr(kStreamOperand, b.getUnitAttr());
    for (auto [result, buffer] : llvm::zip(results, outs))
      result.replaceAllUsesWith(written(b, buffer, result.getType()));
    op.getHandle().replaceAllUsesWith(call.getResult(0));
    op.erase();
    return success();
  }

  /// The combine into a buffer of the dispatch's token rows.
  LogicalResult lowerCombineInto(EpCombineOp op) {
    auto dispatch = op.getHandle().getDefiningOp<func::CallOp>();
    if (dispatch && dispatch.getCallee().starts_with("moert_ep_gather_"))
      return lowerReturnInto(op, dispatch);
    if (dispatch && dispatch.getCallee().starts_with("moert_ep_send_packed_"))
      return lowerReturnPacked(op, dispatch);
    Value x = dispatch && dispatch->hasAttr(kStreamOperand)
                       ? dispatch.getOperand(0).getDefiningOp<bufferization::ToBufferOp>()
                       : Value();
    if (!x)
      return op.emitOpError("convert-moe-to-runtime{into-buffers}: the handle is not "
                            "a moe.ep_dispatch's");
    ImplicitLocOpBuilder b(op.getLoc(), op);
    auto type = cast<RankedTensorType>(op.getType());
    SmallVector<Value> dynamicSizes;
    if (type.isDynamicDim(0))
      dynamicSizes.push_back(memref::DimOp::create(b, x, 0));
    auto [buffer, view] = writeBuffer(b, type, dynamicSizes);
    return callFilling(b, op, "moert_ep_combine_into_" + suffix(type),
                       {readBuffer(b, op.getPartial()), op.getHandle(), view}, buffer);
  }

  /// Rank r owns experts [r*L, (r+1)*L), L = E / ranks (the runtime checks
  /// it): this rank's local ids of the gathered global ones, and their weights.
  /// With replicas chosen per batch (`byRank` phys_to_log) the runtime sent
  /// slots instead: the same map, over slots (slot p on rank p / S).
  static std::pair<Value, Value> localChoices(ImplicitLocOpBuilder &b, Value byRank, Value ids,
                                              Value weights, Value rank, Value ranks) {
    Value experts = tensor::DimOp::create(b, byRank, 0);
    Value perRank =
        arith::IndexCastOp::create(b, b.getI32Type(), arith::DivUIOp::create(b, experts, ranks));
    Value first = arith::MulIOp::create(b, rank, perRank);
    return mapChoices(b, ids, weights, [&](ImplicitLocOpBuilder &ib, Value id, Value, Value) {
      Value offset = arith::SubIOp::create(ib, id, first);
      Value zero = arith::ConstantIntOp::create(ib, ib.getI32Type(), 0);
      Value atLeast = arith::CmpIOp::create(ib, arith::CmpIPredicate::sge, offset, zero);
      Value below = arith::CmpIOp::create(ib, arith::CmpIPredicate::slt, offset, perRank);
      return std::make_pair(Value(arith::AndIOp::create(ib, atLeast, below)), offset);
    });
  }

  /// Each slot's cumulative share of its expert, normalized to end at 1:
  /// (shares of the expert's slots up to p) / (all its slots' shares).
  static Value cumulativeShares(ImplicitLocOpBuilder &b, Value physToLog, Value share) {
    auto type = cast<RankedTensorType>(share.getType());
    Value slotCount = tensor::DimOp::create(b, physToLog, 0);
    SmallVector<Value> dynamic;
    if (type.isDynamicDim(0))
      dynamic.push_back(slotCount);
    Value init = tensor::EmptyOp::create(b, type.getShape(), b.getF32Type(), dynamic);
    auto map = b.getMultiDimIdentityMap(1);
    return linalg::GenericOp::create(
               b, TypeRange{type}, ValueRange{physToLog}, ValueRange{init},
               SmallVector<AffineMap>(2, map),
               SmallVector<utils::IteratorType>{utils::IteratorType::parallel},
               [&](OpBuilder &nb, Location loc, ValueRange in) {
                 ImplicitLocOpBuilder ib(loc, nb);
                 Value slot = linalg::IndexOp::create(ib, 0);
                 Value zero = arith::ConstantOp::create(ib, ib.getF32FloatAttr(0.0f));
                 auto sums = scf::ForOp::create(
                     ib, arith::ConstantIndexOp::create(ib, 0), slotCount,
                     arith::ConstantIndexOp::create(ib, 1), ValueRange{zero, zero},
                     [&](OpBuilder &lb, Location l, Value q, ValueRange acc) {
                       ImplicitLocOpBuilder lq(l, lb);
                       Value same = arith::CmpIOp::create(
                           lq, arith::CmpIPredicate::eq,
                           tensor::ExtractOp::create(lq, physToLog, q), in[0]);
                       Value s = arith::SelectOp::create(
                           lq, same, tensor::ExtractOp::create(lq, share, q), zero);
                       Value upTo = arith::CmpIOp::create(lq, arith::CmpIPredicate::ule, q, slot);
                       Value total = arith::AddFOp::create(lq, acc[0], s);
                       Value before = arith::AddFOp::create(
                           lq, acc[1], arith::SelectOp::create(lq, upTo, s, zero));
                       scf::YieldOp::create(lq, ValueRange{total, before});
                     });
                 linalg::YieldOp::create(ib, ValueRange{arith::DivFOp::create(ib, sums.getResult(1),
                                                                              sums.getResult(0))});
               })
        .getResult(0);
  }

  /// The replica of choice n (n = row*k + choice) of expert `id` (>= 0):
  /// the first slot of the expert with a share whose cumulative share
  /// (`upTo`) passes u = frac(n * 0.6180339887...), in 32-bit fixed point
  /// (the same on every rank and device); the last slot with a share where
  /// rounding leaves none; -1 for an expert without a slot.
  static Value replicaOf(ImplicitLocOpBuilder &ib, Value physToLog, Value share, Value upTo,
                         Value id, Value n) {
    auto i32 = ib.getI32Type();
    auto f32 = ib.getF32Type();
    Value slotCount = tensor::DimOp::create(ib, physToLog, 0);
    Value hashed = arith::MulIOp::create(
        ib, n, arith::ConstantIntOp::create(ib, i32, int64_t(int32_t(0x9E3779B9u))));
    Value top24 = arith::ShRUIOp::create(ib, hashed, arith::ConstantIntOp::create(ib, i32, 8));
    Value u = arith::MulFOp::create(ib, arith::UIToFPOp::create(ib, f32, top24),
                                    arith::ConstantOp::create(ib, ib.getF32FloatAttr(0x1p-24f)));
    Value zeroF = arith::ConstantOp::create(ib, ib.getF32FloatAttr(0.0f));
    Value none = arith::ConstantIntOp::create(ib, i32, -1);
    auto walk = scf::ForOp::create(
        ib, arith::ConstantIndexOp::create(ib, 0), slotCount, arith::ConstantIndexOp::create(ib, 1),
        ValueRange{none, none}, [&](OpBuilder &lb, Location loc, Value p, ValueRange acc) {
          ImplicitLocOpBuilder l(loc, lb);
          Value holds = arith::CmpIOp::create(l, arith::CmpIPredicate::eq,
                                              tensor::ExtractOp::create(l, physToLog, p), id);
          Value positive = arith::CmpFOp::create(l, arith::CmpFPredicate::OGT,
                                                 tensor::ExtractOp::create(l, share, p), zeroF);
          Value held = arith::AndIOp::create(l, holds, positive);
          Value slot = arith::IndexCastOp::create(l, i32, p);
          Value last = arith::SelectOp::create(l, held, slot, acc[1]);
          Value unset = arith::CmpIOp::create(l, arith::CmpIPredicate::slt, acc[0], zeroInt(l));
          Value passes = arith::CmpFOp::create(l, arith::CmpFPredicate::OLT, u,
                                               tensor::ExtractOp::create(l, upTo, p));
          Value take = arith::AndIOp::create(l, arith::AndIOp::create(l, unset, held), passes);
          scf::YieldOp::create(l, ValueRange{arith::SelectOp::create(l, take, slot, acc[0]), last});
        });
    Value found =
        arith::CmpIOp::create(ib, arith::CmpIPredicate::sge, walk.getResult(0), zeroInt(ib));
    return arith::SelectOp::create(ib, found, walk.getResult(0), walk.getResult(1));
  }

  /// n = row*k + choice, as an i32 (wrapping: only its hash matters).
  static Value choiceNumber(ImplicitLocOpBuilder &ib, Value row, Value choice, int64_t topK) {
    return arith::IndexCastOp::create(
        ib, ib.getI32Type(),
        arith::AddIOp::create(
            ib, arith::MulIOp::create(ib, row, arith::ConstantIndexOp::create(ib, topK)), choice));
  }

  /// With a placement (slot p on rank p / S, S = P / ranks): choice j of
  /// gathered row g goes to replicaOf(n = g*k + j); this rank keeps it
  /// (local id p - rank*S) where that replica is one of its slots.
  static std::pair<Value, Value> localChoicesPlaced(ImplicitLocOpBuilder &b, EpDispatchOp op,
                                                    Value ids, Value weights, Value rank,
                                                    Value ranks) {
    Value physToLog = op.getPhysToLog(), share = op.getReplicaShare();
    Value upTo = cumulativeShares(b, physToLog, share);
    Value slotCount = tensor::DimOp::create(b, physToLog, 0);
    Value perRank =
        arith::IndexCastOp::create(b, b.getI32Type(), arith::DivUIOp::create(b, slotCount, ranks));
    Value first = arith::MulIOp::create(b, rank, perRank);
    const int64_t topK = cast<RankedTensorType>(ids.getType()).getDimSize(1);
    return mapChoices(
        b, ids, weights, [&](ImplicitLocOpBuilder &ib, Value id, Value row, Value choice) {
          Value chosen =
              replicaOf(ib, physToLog, share, upTo, id, choiceNumber(ib, row, choice, topK));
          Value offset = arith::SubIOp::create(ib, chosen, first);
          Value atLeast = arith::CmpIOp::create(ib, arith::CmpIPredicate::sge, offset, zeroInt(ib));
          Value below = arith::CmpIOp::create(ib, arith::CmpIPredicate::slt, offset, perRank);
          Value valid = arith::CmpIOp::create(ib, arith::CmpIPredicate::sge, id, zeroInt(ib));
          Value mine = arith::AndIOp::create(ib, valid, arith::AndIOp::create(ib, atLeast, below));
          return std::make_pair(mine, offset);
        });
  }

  static Value zeroInt(ImplicitLocOpBuilder &b) {
    return arith::ConstantIntOp::create(b, b.getI32Type(), 0);
  }

  /// The local ids and weights of the gathered choices: `mineAndLocal(id,
  /// row, choice)` says whether this rank takes the choice and its local id;
  /// the others get -1 and weight 0.
  template <typename F>
  static std::pair<Value, Value> mapChoices(ImplicitLocOpBuilder &b, Value ids, Value weights,
                                            F mineAndLocal) {
    auto idsType = cast<RankedTensorType>(ids.getType());
    auto weightsType = cast<RankedTensorType>(weights.getType());
    auto map = b.getMultiDimIdentityMap(2);
    SmallVector<utils::IteratorType> parallel(2, utils::IteratorType::parallel);
    SmallVector<Value> dynamic;
    if (idsType.isDynamicDim(0))
      dynamic.push_back(tensor::DimOp::create(b, ids, 0));
    Value idsInit =
        tensor::EmptyOp::create(b, idsType.getShape(), idsType.getElementType(), dynamic);
    Value weightsInit =
        tensor::EmptyOp::create(b, weightsType.getShape(), weightsType.getElementType(), dynamic);
    auto local = linalg::GenericOp::create(
        b, TypeRange{idsType, weightsType}, ValueRange{ids, weights},
        ValueRange{idsInit, weightsInit}, SmallVector<AffineMap>(4, map), parallel,
        [&](OpBuilder &nb, Location loc, ValueRange in) {
          ImplicitLocOpBuilder ib(loc, nb);
          Value row = linalg::IndexOp::create(ib, 0), choice = linalg::IndexOp::create(ib, 1);
          auto [mine, localId] = mineAndLocal(ib, in[0], row, choice);
          Value none = arith::ConstantIntOp::create(ib, ib.getI32Type(), -1);
          Value noWeight = arith::ConstantOp::create(ib, ib.getF32FloatAttr(0));
          Value id = arith::SelectOp::create(ib, mine, localId, none);
          Value weight = arith::SelectOp::create(ib, mine, in[1], noWeight);
          linalg::YieldOp::create(ib, ValueRange{id, weight});
        });
    return {local.getResult(0), local.getResult(1)};
  }

  /// What the layer makes of the FP8 `codes` and wire `scales` it
  /// received: with received_scales (the experts read codes) the codes,
  /// and the scales as f32 replace received_scales; else the dequantized
  /// rows.
  static Value receivedRows(ImplicitLocOpBuilder &b, EpDispatchOp op, Value codes, Value scales) {
    DispatchQuantization scheme = *op.getQuantization();
    if (!op.getReceivedScales())
      return dequantizeRows(b, codes, scales, scheme,
                            cast<RankedTensorType>(op.getReceived().getType()));
    op.getReceivedScales().replaceAllUsesWith(
        castTo(b, scalesAsF32(b, scales, scheme), op.getReceivedScales().getType()));
    return castTo(b, codes, op.getReceived().getType());
  }

  /// The all-gather form of a decode-layout dispatch (moert.h's
  /// moert_ep_gather_[fp8_]into_*): every rank's block of S token rows with
  /// global ids, then this rank's view of them: local ids (id - rank*E/R
  /// where the expert is this rank's, else -1) and weights (0 where the id
  /// is -1; with a placement, the replica's slot by the shares, or the slot
  /// the runtime chose per batch). With FP8 quantization the layer
  /// quantizes its rows, E4M3 codes and scales travel, and it dequantizes
  /// what it received or hands it to the experts (receivedRows).
  LogicalResult lowerGatherInto(EpDispatchOp op) {
    const int64_t slots = int64_t(*op.getSlots());
    const bool placed = static_cast<bool>(op.getPhysToLog());
    auto received = cast<RankedTensorType>(op.getReceived().getType());
    auto localIds = cast<RankedTensorType>(op.getLocalIds().getType());
    auto localWeights = cast<RankedTensorType>(op.getLocalWeights().getType());
    if (!received.hasStaticShape() || received.getDimSize(0) % slots != 0)
      return op.emitOpError("convert-moe-to-runtime{all-gather-slots}: the received rows "
                            "must be ranks x slots (")
             << slots << "), got " << received;
    const int64_t tokens = op.getX().getType().getDimSize(0);
    if (!ShapedType::isDynamic(tokens) && tokens > slots)
      return op.emitOpError("convert-moe-to-runtime{all-gather-slots}: ")
             << tokens << " tokens do not fit the " << slots << " slots of a rank's block";
    // The verifier holds the hidden size to a multiple of the FP8 group.
    std::optional<DispatchQuantization> quantization = op.getQuantization();
    const int64_t hidden = received.getDimSize(1);
    ImplicitLocOpBuilder b(op.getLoc(), op);
    SmallVector<Value> args;
    SmallVector<RankedTensorType> gatheredTypes;
    if (quantization) {
      auto [codes, scales] = quantizeRows(b, op.getX(), *quantization);
      args = {readBuffer(b, codes), readBuffer(b, scales)};
      gatheredTypes = {
          received.clone(b.getI8Type()),
          RankedTensorType::get({received.getDimSize(0), hidden / quantGroup(*quantization)},
                                scaleElementType(b, *quantization))};
    } else {
      args = {readBuffer(b, op.getX())};
      gatheredTypes = {received};
    }
    args.append({readBuffer(b, op.getExpertIds()), readBuffer(b, op.getExpertWeights())});
    gatheredTypes.append({localIds, localWeights});
    SmallVector<Value> outs = appendMapPlanAndOuts(b, op, args, gatheredTypes);
    FailureOr<func::FuncOp> callee =
        declare(op,
                std::string("moert_ep_gather_") + (placed ? "placed_" : "") +
                    (quantization ? "fp8_" : "") + "into_" + suffix(op.getX().getType()),
                b.getFunctionType(ValueRange(args).getTypes(), {b.getI64Type()}));
    FailureOr<func::FuncOp> rankFn =
        declare(op, "moert_rank", b.getFunctionType({}, {b.getI32Type()}), /*cInterface=*/false);
    if (failed(callee) || failed(rankFn))
      return failure();
    auto call = func::CallOp::create(b, *callee, args);
    call->setAttr(kStreamOperand, b.getUnitAttr());
    call->setAttr(kGatherSlots, b.getI64IntegerAttr(slots));
    Value rows = written(b, outs[0], gatheredTypes[0]);
    if (quantization)
      rows = receivedRows(b, op, rows, written(b, outs[1], gatheredTypes[1]));
    Value ids = written(b, outs[outs.size() - 2], localIds);
    Value weights = written(b, outs.back(), localWeights);
    Value rank = func::CallOp::create(b, *rankFn, ValueRange{}).getResult(0);
    Value ranks = arith::ConstantIndexOp::create(b, received.getDimSize(0) / slots);
    auto local = !placed ? localChoices(b, op.getExpertRank(), ids, weights, rank, ranks)
                 : op.getPerBatchReplicas()
                     ? localChoices(b, op.getPhysToLog(), ids, weights, rank, ranks)
                     : localChoicesPlaced(b, op, ids, weights, rank, ranks);
    op.getReceived().replaceAllUsesWith(rows);
    op.getLocalIds().replaceAllUsesWith(local.first);
    op.getLocalWeights().replaceAllUsesWith(local.second);
    op.getHandle().replaceAllUsesWith(call.getResult(0));
    op.erase();
    return success();
  }

  /// The destinations of a token's choices (`targets`: experts, or slots
  /// with a placement; `perRank` of them a rank): choice j's rank, or -1
  /// where it is masked, out of range, or an earlier choice of the token
  /// goes to the same rank. One row per (token, destination rank).
  static Value destinations(ImplicitLocOpBuilder &b, Value targets, Value perRank, int64_t ranks) {
    auto type = cast<RankedTensorType>(targets.getType());
    SmallVector<Value> dynamic;
    if (type.isDynamicDim(0))
      dynamic.push_back(tensor::DimOp::create(b, targets, 0));
    Value init = tensor::EmptyOp::create(b, type.getShape(), b.getI32Type(), dynamic);
    auto map = b.getMultiDimIdentityMap(2);
    return linalg::GenericOp::create(
               b, TypeRange{type}, ValueRange{targets}, ValueRange{init},
               SmallVector<AffineMap>(2, map),
               SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
               [&](OpBuilder &nb, Location loc, ValueRange in) {
                 ImplicitLocOpBuilder ib(loc, nb);
                 Value limit = arith::MulIOp::create(
                     ib, perRank, arith::ConstantIntOp::create(ib, ib.getI32Type(), ranks));
                 auto rankOf = [&](ImplicitLocOpBuilder &l, Value target) -> Value {
                   Value valid = arith::AndIOp::create(
                       l, arith::CmpIOp::create(l, arith::CmpIPredicate::sge, target, zeroInt(l)),
                       arith::CmpIOp::create(l, arith::CmpIPredicate::slt, target, limit));
                   return arith::SelectOp::create(
                       l, valid, arith::DivSIOp::create(l, target, perRank),
                       arith::ConstantIntOp::create(l, l.getI32Type(), -1));
                 };
                 Value token = linalg::IndexOp::create(ib, 0);
                 Value choice = linalg::IndexOp::create(ib, 1);
                 Value mine = rankOf(ib, in[0]);
                 Value no = arith::ConstantOp::create(ib, ib.getBoolAttr(false));
                 auto seen = scf::ForOp::create(
                     ib, arith::ConstantIndexOp::create(ib, 0), choice,
                     arith::ConstantIndexOp::create(ib, 1), ValueRange{no},
                     [&](OpBuilder &lb, Location l, Value j, ValueRange acc) {
                       ImplicitLocOpBuilder lj(l, lb);
                       Value other =
                           rankOf(lj, tensor::ExtractOp::create(lj, targets, ValueRange{token, j}));
                       Value same =
                           arith::CmpIOp::create(lj, arith::CmpIPredicate::eq, other, mine);
                       scf::YieldOp::create(lj, ValueRange{arith::OrIOp::create(lj, acc[0], same)});
                     });
                 Value none = arith::ConstantIntOp::create(ib, ib.getI32Type(), -1);
                 linalg::YieldOp::create(
                     ib, ValueRange{arith::SelectOp::create(ib, seen.getResult(0), none, mine)});
               })
        .getResult(0);
  }

  /// [T, 2k] f32: the bits of each token's targets, then its weights: what
  /// travels with each of the token's rows.
  static Value routeRows(ImplicitLocOpBuilder &b, Value targets, Value weights) {
    auto type = cast<RankedTensorType>(targets.getType());
    const int64_t topK = type.getDimSize(1);
    SmallVector<Value> dynamic;
    if (type.isDynamicDim(0))
      dynamic.push_back(tensor::DimOp::create(b, targets, 0));
    auto routeType = RankedTensorType::get({type.getDimSize(0), 2 * topK}, b.getF32Type());
    Value init = tensor::EmptyOp::create(b, routeType.getShape(), b.getF32Type(), dynamic);
    return linalg::GenericOp::create(
               b, TypeRange{routeType}, ValueRange{}, ValueRange{init},
               SmallVector<AffineMap>{b.getMultiDimIdentityMap(2)},
               SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
               [&](OpBuilder &nb, Location loc, ValueRange) {
                 ImplicitLocOpBuilder ib(loc, nb);
                 Value token = linalg::IndexOp::create(ib, 0);
                 Value column = linalg::IndexOp::create(ib, 1);
                 Value k = arith::ConstantIndexOp::create(ib, topK);
                 Value isTarget = arith::CmpIOp::create(ib, arith::CmpIPredicate::ult, column, k);
                 Value j = arith::SelectOp::create(ib, isTarget, column,
                                                   arith::SubIOp::create(ib, column, k));
                 Value target = arith::BitcastOp::create(
                     ib, ib.getF32Type(),
                     tensor::ExtractOp::create(ib, targets, ValueRange{token, j}));
                 Value weight = tensor::ExtractOp::create(ib, weights, ValueRange{token, j});
                 linalg::YieldOp::create(
                     ib, ValueRange{arith::SelectOp::create(ib, isTarget, target, weight)});
               })
        .getResult(0);
  }

  /// The received route rows [C, 2k] as ids (i32) and weights.
  static std::pair<Value, Value> splitRoute(ImplicitLocOpBuilder &b, Value route, int64_t topK) {
    auto type = cast<RankedTensorType>(route.getType());
    auto idsType = RankedTensorType::get({type.getDimSize(0), topK}, b.getI32Type());
    auto weightsType = idsType.clone(b.getF32Type());
    auto split = linalg::GenericOp::create(
        b, TypeRange{idsType, weightsType}, ValueRange{},
        ValueRange{tensor::EmptyOp::create(b, idsType.getShape(), b.getI32Type()),
                   tensor::EmptyOp::create(b, weightsType.getShape(), b.getF32Type())},
        SmallVector<AffineMap>(2, b.getMultiDimIdentityMap(2)),
        SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
        [&](OpBuilder &nb, Location loc, ValueRange) {
          ImplicitLocOpBuilder ib(loc, nb);
          Value row = linalg::IndexOp::create(ib, 0), j = linalg::IndexOp::create(ib, 1);
          Value target = tensor::ExtractOp::create(ib, route, ValueRange{row, j});
          Value weight = tensor::ExtractOp::create(
              ib, route,
              ValueRange{row,
                         arith::AddIOp::create(ib, j, arith::ConstantIndexOp::create(ib, topK))});
          linalg::YieldOp::create(
              ib, ValueRange{arith::BitcastOp::create(ib, ib.getI32Type(), target), weight});
        });
    return {split.getResult(0), split.getResult(1)};
  }

  /// pack-in-layer: the prefill dispatch's rows packed by the layer's own
  /// ops (on a GPU, kernels on its stream, with no host copy of a row):
  /// each token's choices get their destination ranks (with a placement,
  /// the replica by the shares as in the all-gather, n = t*k + j, or the
  /// one the runtime chose for this batch: moert_ep_select_slots_into),
  /// moe.dispatch ops over the ranks group the token rows (with FP8, their
  /// codes and scales, quantized here) and their route rows (targets and
  /// weights) by destination, and
  /// moert_ep_send_packed_[placed_][fp8_]into_* moves rank p's block
  /// [offsets[p], offsets[p+1]) to rank p, where the rows arrive in rank
  /// order; this rank dequantizes what it received (or hands the codes to
  /// the experts: receivedRows) and maps the received targets to its own
  /// experts as the all-gather does.
  LogicalResult lowerPackedInto(EpDispatchOp op) {
    auto fail = [&](const Twine &why) {
      return op.emitOpError("convert-moe-to-runtime{pack-in-layer}: ") << why;
    };
    auto received = cast<RankedTensorType>(op.getReceived().getType());
    auto xType = op.getX().getType();
    const int64_t topK = op.getExpertIds().getType().getDimSize(1);
    if (!received.hasStaticShape() || xType.isDynamicDim(1) || !op.getEp())
      return fail("the received rows and hidden size must be static and the group's size (ep) "
                  "known, got ")
             << received;
    const int64_t ranks = int64_t(*op.getEp());
    const bool placed = static_cast<bool>(op.getPhysToLog());
    ImplicitLocOpBuilder b(op.getLoc(), op);
    auto i32 = b.getI32Type();
    Value map = placed ? op.getPhysToLog() : op.getExpertRank();
    Value perRank = arith::IndexCastOp::create(
        b, i32,
        arith::DivUIOp::create(b, tensor::DimOp::create(b, map, 0),
                               arith::ConstantIndexOp::create(b, ranks)));
    Value targets = op.getExpertIds();
    if (op.getPerBatchReplicas()) { // the runtime splits the batch first
      auto idsType = op.getExpertIds().getType();
      SmallVector<Value> dynamic;
      if (idsType.isDynamicDim(0))
        dynamic.push_back(tensor::DimOp::create(b, targets, 0));
      auto [buffer, view] = writeBuffer(b, idsType, dynamic);
      SmallVector<Value> args = {readBuffer(b, targets), readBuffer(b, op.getPhysToLog()),
                                 readBuffer(b, buildPlan(b, op)), view, nullStream(b)};
      FailureOr<func::FuncOp> select = declare(op, "moert_ep_select_slots_into",
                                               b.getFunctionType(ValueRange(args).getTypes(), {}));
      if (failed(select))
        return failure();
      func::CallOp::create(b, *select, args)->setAttr(kStreamOperand, b.getUnitAttr());
      targets = written(b, buffer, idsType);
    } else if (placed) {
      Value physToLog = op.getPhysToLog(), share = op.getReplicaShare();
      Value upTo = cumulativeShares(b, physToLog, share);
      targets = mapChoices(b, targets, op.getExpertWeights(),
                           [&](ImplicitLocOpBuilder &ib, Value id, Value row, Value choice) {
                             Value valid = arith::CmpIOp::create(ib, arith::CmpIPredicate::sge, id,
                                                                 zeroInt(ib));
                             Value slot = replicaOf(ib, physToLog, share, upTo, id,
                                                    choiceNumber(ib, row, choice, topK));
                             return std::make_pair(valid, slot);
                           })
                    .first;
    }
    Value dest = destinations(b, targets, perRank, ranks);
    const int64_t tokens = xType.getDimSize(0);
    const int64_t packedRows = ShapedType::isDynamic(tokens) ? ShapedType::kDynamic : tokens * topK;
    auto pack = [&](Value in) {
      auto type = cast<RankedTensorType>(in.getType());
      return DispatchOp::create(
          b, type.clone({packedRows, type.getDimSize(1)}), RankedTensorType::get({packedRows}, i32),
          RankedTensorType::get({tokens, topK}, i32), RankedTensorType::get({ranks + 1}, i32), in,
          dest, b.getI64IntegerAttr(ranks), IntegerAttr(), IntegerAttr());
    };
    // What travels a row: the token's row, or its E4M3 codes and scales
    // (quantized here, once per token), then its route row.
    std::optional<DispatchQuantization> quantization = op.getQuantization();
    SmallVector<Value> payload = {op.getX()};
    SmallVector<RankedTensorType> receivedTypes = {received};
    if (quantization) {
      auto [codes, scales] = quantizeRows(b, op.getX(), *quantization);
      payload = {codes, scales};
      receivedTypes = {received.clone(b.getI8Type()),
                       RankedTensorType::get({received.getDimSize(0),
                                              received.getDimSize(1) / quantGroup(*quantization)},
                                             scaleElementType(b, *quantization))};
    }
    payload.push_back(routeRows(b, targets, op.getExpertWeights()));
    receivedTypes.push_back(
        RankedTensorType::get({received.getDimSize(0), 2 * topK}, b.getF32Type()));
    SmallVector<DispatchOp> packed;
    SmallVector<Value> args;
    for (Value part : payload) {
      packed.push_back(pack(part));
      args.push_back(readBuffer(b, packed.back().getDispatched()));
    }
    args.push_back(readBuffer(b, packed.front().getExpertOffsets()));
    SmallVector<Value> outs = appendMapPlanAndOuts(b, op, args, receivedTypes);
    FailureOr<func::FuncOp> callee =
        declare(op,
                std::string("moert_ep_send_packed_") + (placed ? "placed_" : "") +
                    (quantization ? "fp8_" : "") + "into_" + suffix(xType),
                b.getFunctionType(ValueRange(args).getTypes(), {b.getI64Type()}));
    FailureOr<func::FuncOp> rankFn =
        declare(op, "moert_rank", b.getFunctionType({}, {i32}), /*cInterface=*/false);
    if (failed(callee) || failed(rankFn))
      return failure();
    auto call = func::CallOp::create(b, *callee, args);
    call->setAttr(kStreamOperand, b.getUnitAttr());
    packedSlots[call] = packed.front().getSlot();
    auto [ids, weights] = splitRoute(b, written(b, outs.back(), receivedTypes.back()), topK);
    Value rank = func::CallOp::create(b, *rankFn, ValueRange{}).getResult(0);
    auto local = localChoices(b, map, ids, weights, rank, arith::ConstantIndexOp::create(b, ranks));
    Value rows = written(b, outs[0], receivedTypes[0]);
    if (quantization)
      rows = receivedRows(b, op, rows, written(b, outs[1], receivedTypes[1]));
    op.getReceived().replaceAllUsesWith(rows);
    op.getLocalIds().replaceAllUsesWith(castTo(b, local.first, op.getLocalIds().getType()));
    op.getLocalWeights().replaceAllUsesWith(
        castTo(b, local.second, op.getLocalWeights().getType()));
    op.getHandle().replaceAllUsesWith(call.getResult(0));
    op.erase();
    return success();
  }

  /// The packed dispatch's combine: the partial rows go back the way they
  /// came (moert_ep_return_packed_into_*) into the send order, and each
  /// token sums its rows (one a destination rank; moe.combine with weight
  /// 1, in choice order, f32, rounded once).
  LogicalResult lowerReturnPacked(EpCombineOp op, func::CallOp send) {
    auto slot = packedSlots.find(send);
    auto sent = send.getOperand(0).getDefiningOp<bufferization::ToBufferOp>();
    if (slot == packedSlots.end() || !sent)
      return op.emitOpError("convert-moe-to-runtime{pack-in-layer}: the handle is not a "
                            "packed dispatch's");
    ImplicitLocOpBuilder b(op.getLoc(), op);
    auto type = cast<RankedTensorType>(op.getType());
    auto returnedType =
        RankedTensorType::get({ShapedType::kDynamic, type.getDimSize(1)}, type.getElementType());
    auto [buffer, view] = writeBuffer(b, returnedType, {memref::DimOp::create(b, sent, 0)});
    SmallVector<Value> args = {readBuffer(b, op.getPartial()), op.getHandle(), view, nullStream(b)};
    FailureOr<func::FuncOp> callee = declare(op, "moert_ep_return_packed_into_" + suffix(type),
                                             b.getFunctionType(ValueRange(args).getTypes(), {}));
    if (failed(callee))
      return failure();
    func::CallOp::create(b, *callee, args)->setAttr(kStreamOperand, b.getUnitAttr());
    Value returned = written(b, buffer, returnedType);
    auto slotType = cast<RankedTensorType>(slot->second.getType());
    SmallVector<Value> dynamic;
    if (slotType.isDynamicDim(0))
      dynamic.push_back(tensor::DimOp::create(b, slot->second, 0));
    Value ones =
        linalg::FillOp::create(
            b, arith::ConstantOp::create(b, b.getF32FloatAttr(1.0f)).getResult(),
            tensor::EmptyOp::create(b, slotType.getShape(), b.getF32Type(), dynamic).getResult())
            .getResult(0);
    Value y = CombineOp::create(b, type, returned, slot->second, ones);
    op.getResult().replaceAllUsesWith(y);
    op.erase();
    return success();
  }

  /// The all-gather dispatch's combine: block r of the partial rows back to
  /// rank r, then each of this rank's tokens sums its ranks' rows in rank
  /// order (f32, rounded once).
  LogicalResult lowerReturnInto(EpCombineOp op, func::CallOp gather) {
    auto x = gather.getOperand(0).getDefiningOp<bufferization::ToBufferOp>();
    auto slotsAttr = gather->getAttrOfType<IntegerAttr>(kGatherSlots);
    ImplicitLocOpBuilder b(op.getLoc(), op);
    auto partialType = cast<RankedTensorType>(op.getPartial().getType());
    auto type = cast<RankedTensorType>(op.getType());
    if (!x || !slotsAttr || !partialType.hasStaticShape() || type.isDynamicDim(1))
      return op.emitOpError("convert-moe-to-runtime{all-gather-slots}: the combine of an "
                            "all-gather dispatch needs static partial rows and hidden size");
    const int64_t rows = partialType.getDimSize(0), hidden = type.getDimSize(1);
    const int64_t slots = slotsAttr.getInt(), ranks = rows / slots;
    auto [buffer, view] = writeBuffer(b, partialType);
    SmallVector<Value> args = {readBuffer(b, op.getPartial()), op.getHandle(), view, nullStream(b)};
    FailureOr<func::FuncOp> callee = declare(op, "moert_ep_return_into_" + suffix(type),
                                             b.getFunctionType(ValueRange(args).getTypes(), {}));
    if (failed(callee))
      return failure();
    func::CallOp::create(b, *callee, args)->setAttr(kStreamOperand, b.getUnitAttr());
    Value returned = written(b, buffer, partialType);
    // [ranks*S, H] -> [ranks, S, H]; this rank's T tokens are rows [0, T).
    auto blocks = RankedTensorType::get({ranks, slots, hidden}, type.getElementType());
    Value split = tensor::ExpandShapeOp::create(b, blocks, returned,
                                                SmallVector<ReassociationIndices>{{0, 1}, {2}});
    OpFoldResult tokens = type.isDynamicDim(0)
                              ? OpFoldResult(memref::DimOp::create(b, x, 0).getResult())
                              : OpFoldResult(b.getIndexAttr(type.getDimSize(0)));
    auto mineType =
        RankedTensorType::get({ranks, type.getDimSize(0), hidden}, type.getElementType());
    Value mine = tensor::ExtractSliceOp::create(
        b, mineType, split, SmallVector<OpFoldResult>(3, b.getIndexAttr(0)),
        SmallVector<OpFoldResult>{b.getIndexAttr(ranks), tokens, b.getIndexAttr(hidden)},
        SmallVector<OpFoldResult>(3, b.getIndexAttr(1)));
    SmallVector<Value> dynamicSizes;
    if (type.isDynamicDim(0))
      dynamicSizes.push_back(cast<Value>(tokens));
    auto sumType = type.clone(b.getF32Type());
    Value zero = arith::ConstantOp::create(b, b.getF32FloatAttr(0));
    Value init = linalg::FillOp::create(
                     b, zero,
                     tensor::EmptyOp::create(b, sumType.getShape(), b.getF32Type(), dynamicSizes)
                         .getResult())
                     .getResult(0);
    MLIRContext *ctx = b.getContext();
    AffineExpr t = getAffineDimExpr(0, ctx), h = getAffineDimExpr(1, ctx),
               r = getAffineDimExpr(2, ctx);
    auto sum = linalg::GenericOp::create(
        b, TypeRange{sumType}, ValueRange{mine}, ValueRange{init},
        SmallVector<AffineMap>{AffineMap::get(3, 0, {r, t, h}, ctx),
                               AffineMap::get(3, 0, {t, h}, ctx)},
        SmallVector<utils::IteratorType>{utils::IteratorType::parallel,
                                         utils::IteratorType::parallel,
                                         utils::IteratorType::reduction},
        [&](OpBuilder &nb, Location loc, ValueRange in) {
          ImplicitLocOpBuilder ib(loc, nb);
          Value v = in[0].getType().isF32()
                        ? in[0]
                        : arith::ExtFOp::create(ib, ib.getF32Type(), in[0]).getResult();
          linalg::YieldOp::create(ib, ValueRange{arith::AddFOp::create(ib, in[1], v)});
        });
    Value y = sum.getResult(0);
    if (!type.getElementType().isF32()) {
      Value yInit =
          tensor::EmptyOp::create(b, type.getShape(), type.getElementType(), dynamicSizes);
      auto map = b.getMultiDimIdentityMap(2);
      y = linalg::GenericOp::create(
              b, TypeRange{type}, ValueRange{y}, ValueRange{yInit}, SmallVector<AffineMap>(2, map),
              SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
              [&](OpBuilder &nb, Location loc, ValueRange in) {
                ImplicitLocOpBuilder ib(loc, nb);
                linalg::YieldOp::create(
                    ib, ValueRange{arith::TruncFOp::create(ib, type.getElementType(), in[0])});
              })
              .getResult(0);
    }
    op.getResult().replaceAllUsesWith(y);
    op.erase();
    return success();
  }

  LogicalResult lowerDispatch(EpDispatchOp op) {
    if (intoBuffers && allGatherSlots && op.getSlots())
      return lowerGatherInto(op);
    if (intoBuffers && packInLayer && !op.getSlots())
      return lowerPackedInto(op);
    if (intoBuffers)
      return lowerDispatchInto(op);
    if (!op.getSlots() && !op.getReceived().getType().isDynamicDim(0))
      return op.emitOpError("convert-moe-to-runtime: static received rows without "
                            "slots are filled into buffers (into-buffers)");
    ImplicitLocOpBuilder b(op.getLoc(), op);
    SmallVector<Value> args = {
        castTo(b, op.getX(), erased(op.getX().getType())),
        castTo(b, op.getExpertIds(), erased(op.getExpertIds().getType())),
        castTo(b, op.getExpertWeights(), erased(op.getExpertWeights().getType())),
        buildPlan(b, op)};
    // With a placement: phys_to_log and replica_share instead of expert_rank.
    const bool placed = static_cast<bool>(op.getPhysToLog());
    SmallVector<Value> maps = placed ? SmallVector<Value>{op.getPhysToLog(), op.getReplicaShare()}
                                     : SmallVector<Value>{op.getExpertRank()};
    for (auto [i, map] : llvm::enumerate(maps))
      args.insert(args.begin() + 3 + i, castTo(b, map, erased(map.getType())));
    // The call returns the op's results in order (FP8 scales included).
    SmallVector<Type> results;
    for (Value result : op->getResults())
      results.push_back(isa<RankedTensorType>(result.getType()) ? erased(result.getType())
                                                                : result.getType());
    const bool codes = static_cast<bool>(op.getReceivedScales());
    FailureOr<func::FuncOp> callee =
        declare(op,
                std::string("moert_ep_dispatch_") + (placed ? "placed_" : "") +
                    (codes ? "fp8_" : "") + suffix(op.getX().getType()),
                b.getFunctionType(ValueRange(args).getTypes(), results));
    if (failed(callee))
      return failure();
    auto call = func::CallOp::create(b, *callee, args);
    for (auto [mine, theirs] : llvm::zip(op->getResults(), call.getResults()))
      mine.replaceAllUsesWith(castTo(b, theirs, mine.getType()));
    op.erase();
    return success();
  }

  LogicalResult lowerCombine(EpCombineOp op) {
    if (intoBuffers)
      return lowerCombineInto(op);
    ImplicitLocOpBuilder b(op.getLoc(), op);
    SmallVector<Value> args = {
        castTo(b, op.getPartial(), erased(op.getPartial().getType())), op.getHandle()};
    Type result = erased(op.getType());
    FailureOr<func::FuncOp> callee =
        declare(op, "moert_ep_combine_" + suffix(op.getType()),
                b.getFunctionType(ValueRange(args).getTypes(), {result}));
    if (failed(callee))
      return failure();
    auto call = func::CallOp::create(b, *callee, args);
    op.getResult().replaceAllUsesWith(castTo(b, call.getResult(0), op.getType()));
    op.erase();
    return success();
  }
};
} // namespace
