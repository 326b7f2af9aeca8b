//===- VerifyCollectives.cpp - all ranks issue the same collectives -------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/Transforms/Passes.h"

#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEVERIFYCOLLECTIVES
#include "moe/Dialect/MoE/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {
constexpr StringLiteral kUniformArg = "moe.uniform";

bool isRuntimeCollective(func::CallOp call) {
  return call.getCallee().starts_with("moert_") && call.getCallee() != "moert_rank";
}

bool isCollective(Operation *op) {
  if (isa<EpDispatchOp, EpCombineOp, AgreeCountOp, TpGatherOp>(op))
    return true;
  auto call = dyn_cast<func::CallOp>(op);
  return call && isRuntimeCollective(call);
}

/// Which values are the same on every rank. Optimistic on cycles (loop
/// iter_args): a cycle that only carries uniform values stays uniform.
class Uniformity {
public:
  bool isUniform(Value v) {
    auto [it, inserted] = memo.try_emplace(v, true);
    if (!inserted)
      return it->second;
    bool uniform = compute(v);
    memo[v] = uniform;
    return uniform;
  }

private:
  bool compute(Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return argument(arg);
    Operation *def = v.getDefiningOp();
    if (isa<AgreeCountOp>(def))
      return true;
    if (auto call = dyn_cast<func::CallOp>(def))
      return call.getCallee() == "moert_agree_max";
    // A uniform choice between uniform values (e.g. the phase, once its
    // variants are inlined into the entry).
    if (auto branch = dyn_cast<scf::IfOp>(def)) {
      unsigned i = cast<OpResult>(v).getResultNumber();
      return isUniform(branch.getCondition()) &&
             isUniform(branch.thenYield().getOperand(i)) &&
             isUniform(branch.elseYield().getOperand(i));
    }
    if (isa<EpDispatchOp, EpCombineOp, TpSliceOp, TpGatherOp>(def) ||
        !isMemoryEffectFree(def) ||
        def->getNumRegions() != 0)
      return false;
    return llvm::all_of(def->getOperands(), [&](Value o) { return isUniform(o); });
  }

  bool argument(BlockArgument arg) {
    Operation *parent = arg.getOwner()->getParentOp();
    if (auto func = dyn_cast<FunctionOpInterface>(parent))
      return arg.getOwner()->isEntryBlock() &&
             func.getArgAttr(arg.getArgNumber(), kUniformArg);
    if (auto loop = dyn_cast<scf::ForOp>(parent)) {
      bool bounds = isUniform(loop.getLowerBound()) &&
                    isUniform(loop.getUpperBound()) && isUniform(loop.getStep());
      if (arg == loop.getInductionVar())
        return bounds;
      unsigned i = arg.getArgNumber() - 1;
      auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
      return bounds && isUniform(loop.getInitArgs()[i]) &&
             isUniform(yield.getOperand(i));
    }
    return false; // chunk data, linalg bodies, ...: rank-local
  }

  DenseMap<Value, bool> memo;
};

/// The functions of `root` that issue collectives, themselves or through
/// the functions they call (a fixpoint over the calls).
DenseSet<Operation *> functionsWithCollectives(Operation *root) {
  DenseSet<Operation *> issuing;
  SmallVector<std::pair<Operation *, StringRef>> calls; // (caller, callee)
  DenseMap<StringRef, Operation *> byName;
  root->walk([&](FunctionOpInterface func) {
    byName[func.getName()] = func;
    func->walk([&](Operation *op) {
      if (isCollective(op))
        issuing.insert(func);
      else if (auto call = dyn_cast<func::CallOp>(op))
        calls.push_back({func, call.getCallee()});
    });
  });
  for (bool changed = true; changed;) {
    changed = false;
    for (auto [caller, callee] : calls) {
      Operation *target = byName.lookup(callee);
      if (target && issuing.contains(target) && !issuing.contains(caller))
        changed = issuing.insert(caller).second;
    }
  }
  return issuing;
}

struct MoEVerifyCollectivesPass
    : moe::impl::MoEVerifyCollectivesBase<MoEVerifyCollectivesPass> {
  void runOnOperation() override {
    Uniformity uniformity;
    bool failed = false;
    // A call of a function that issues collectives is held to the same
    // rules: every rank must make it.
    DenseSet<Operation *> issuing = functionsWithCollectives(getOperation());
    DenseMap<StringRef, Operation *> byName;
    getOperation()->walk([&](FunctionOpInterface f) { byName[f.getName()] = f; });
    getOperation()->walk([&](Operation *op) {
      bool viaCall = false;
      if (auto call = dyn_cast<func::CallOp>(op); call && !isRuntimeCollective(call))
        viaCall = issuing.contains(byName.lookup(call.getCallee()));
      if (!isCollective(op) && !viaCall)
        return;
      ++numCollectives;
      subject =
          viaCall
              ? ("call of @" + cast<func::CallOp>(op).getCallee() + ", which issues collectives,")
                    .str()
              : "collective";
      failed |= !check(op, uniformity);
    });
    if (failed)
      signalPassFailure();
  }

  bool reject(Operation *collective, Operation *cause, const Twine &why) {
    InFlightDiagnostic diag = collective->emitError()
                              << subject
                              << " under control flow that can differ between ranks: " << why;
    diag.attachNote(cause->getLoc())
        << "this " << cause->getName() << " decides whether it runs";
    return false;
  }

  /// What is being checked, for messages: a collective or a call of one.
  std::string subject;

  bool check(Operation *collective, Uniformity &uniformity) {
    for (Operation *parent = collective->getParentOp(); parent;
         parent = parent->getParentOp()) {
      if (auto func = dyn_cast<FunctionOpInterface>(parent))
        return checkBranches(collective, func, uniformity);
      if (auto branch = dyn_cast<scf::IfOp>(parent)) {
        if (!uniformity.isUniform(branch.getCondition()))
          return reject(collective, parent,
                        "the scf.if condition depends on rank-local data");
        continue;
      }
      if (auto loop = dyn_cast<scf::ForOp>(parent)) {
        if (!uniformity.isUniform(loop.getLowerBound()) ||
            !uniformity.isUniform(loop.getUpperBound()) ||
            !uniformity.isUniform(loop.getStep()))
          return reject(collective, parent,
                        "the scf.for trip count is not agreed across ranks "
                        "(bound it by moe.agree_count)");
        continue;
      }
      if (auto chunks = dyn_cast<ChunkLoopOp>(parent)) {
        if (!chunks.getAgreed())
          return reject(collective, parent,
                        "the moe.chunk_loop trip count is not agreed across "
                        "ranks (mark it 'agreed')");
        continue;
      }
      if (isa<ModuleOp>(parent)) {
        collective->emitError() << subject
                                << " under control flow that can differ between ranks: it is "
                                   "outside any function";
        return false;
      }
      return reject(collective, parent,
                    "its trip count or condition cannot be analysed");
    }
    return true;
  }

  /// Within a function of several blocks, every conditional branch decides
  /// whether later collectives run.
  bool checkBranches(Operation *collective, FunctionOpInterface func,
                     Uniformity &uniformity) {
    Region &body = func.getFunctionBody();
    if (body.hasOneBlock())
      return true;
    for (Block &block : body)
      if (auto branch = dyn_cast<cf::CondBranchOp>(block.getTerminator()))
        if (!uniformity.isUniform(branch.getCondition()))
          return reject(collective, branch,
                        "a cf.cond_br condition depends on rank-local data");
    return true;
  }
};
} // namespace
