//===- PlanCheck.cpp - a dispatch's plan and shapes, checked --------------===//
#include "PlanCheck.h"
#include "Message.h"

#include <algorithm>
#include <sstream>

using namespace moert;

namespace {
/// "2^40" for powers of two, else the number: limits read better that way.
std::string amount(int64_t v) {
  if (v > 1024 && (v & (v - 1)) == 0)
    return "2^" + std::to_string(__builtin_ctzll(uint64_t(v)));
  return std::to_string(v);
}

template <typename... Parts> std::string cat(const Parts &...parts) {
  MessageStream os;
  (os << ... << parts);
  return os.str();
}

/// `value` in [lo, hi], else a message naming the field.
Status inRange(const char *what, int64_t value, int64_t lo, int64_t hi,
               const char *unit = "") {
  if (value < lo)
    return cat("dispatch: ", what, " = ", value, " is ",
               lo == 0 ? "negative" : "below the minimum " + std::to_string(lo));
  if (value > hi)
    return cat("dispatch: ", what, " = ", value, " is over the runtime's limit of ",
               amount(hi), unit);
  return std::nullopt;
}

/// The plan's fields by index, as messages name them.
const char *const kFields[] = {"plan field capacity",
                               "plan field max_tokens",
                               "plan field slots",
                               "plan field quantization",
                               "plan field ranks",
                               "plan field send_bytes",
                               "plan field recv_bytes",
                               "plan field expert_rows_bytes",
                               "plan field combine_bytes",
                               "plan field experts"};

/// A workspace's size: the plan's, or else rows x bytes per row, checked.
Status workspace(const char *name, int64_t given, int64_t rows, int64_t rowBytes,
                 int64_t &out) {
  if (given) {
    out = given; // already checked against the limit
    return std::nullopt;
  }
  if (!checkedMul(rows, rowBytes, out) || out > limits::kMaxWorkspaceBytes)
    return cat("dispatch: workspace '", name, "' derived from the plan (", rows,
               " rows x ", rowBytes, " bytes) is over the runtime's limit of ",
               amount(limits::kMaxWorkspaceBytes), " bytes");
  return std::nullopt;
}

std::string dims(const int64_t *sizes, int rank) {
  MessageStream os;
  os << "[";
  for (int d = 0; d < rank; ++d)
    os << (d ? ", " : "") << sizes[d];
  os << "]";
  return os.str();
}

/// The shared part of both descriptor checks.
Status checkDescriptor(const void *aligned, int64_t offset, const int64_t *sizes,
                       const int64_t *strides, int rank, const char *what,
                       const char *name, int64_t elementBytes) {
  // Messages only: built when one is returned.
  auto memref = [&] { return cat(what, ": memref '", name, "' "); };
  int64_t elements = 1;
  for (int d = 0; d < rank; ++d) {
    if (sizes[d] < 0)
      return cat(memref(), "has size ", sizes[d], " in dimension ", d);
    if (!checkedMul(elements, sizes[d], elements))
      return cat(memref(), dims(sizes, rank), " has more elements than int64 holds");
  }
  if (offset < 0)
    return cat(memref(), "has offset ", offset);
  // Dense row-major: the last dimension contiguous, rows cols apart (a
  // dimension of size <= 1 may have any stride).
  bool dense = sizes[rank - 1] <= 1 || strides[rank - 1] == 1;
  if (rank == 2)
    dense &= sizes[0] <= 1 || strides[0] == sizes[1];
  if (!dense)
    return cat(memref(), dims(sizes, rank), " has strides ", dims(strides, rank),
               "; the runtime needs it dense row-major",
               rank == 2 ? " (strides [cols, 1])" : " (stride 1)");
  if (elements == 0)
    return std::nullopt;
  if (!aligned)
    return cat(memref(), dims(sizes, rank), " has a null data pointer");
  int64_t end, bytes;
  if (!checkedAdd(offset, elements, end) || !checkedMul(end, elementBytes, bytes))
    return cat(memref(), dims(sizes, rank), " at offset ", offset,
               " ends past what int64 addresses");
  uintptr_t last;
  if (__builtin_add_overflow(reinterpret_cast<uintptr_t>(aligned), uintptr_t(bytes), &last))
    return cat(memref(), dims(sizes, rank), " at offset ", offset,
               " wraps around the address space");
  return std::nullopt;
}
} // namespace

uint64_t moert::planHash(const PlanFields &p) {
  const int64_t values[] = {p.capacity,  p.maxTokens,       p.slots,
                            p.quantization, p.ranks,        p.sendBytes,
                            p.recvBytes, p.expertRowsBytes, p.combineBytes,
                            p.experts, p.replicaSelection};
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  const int64_t count =
      p.count > MOERT_DISPATCH_PLAN_FIELDS && p.count <= MOERT_DISPATCH_PLAN_FIELDS_MAX
          ? p.count
          : int64_t(MOERT_DISPATCH_PLAN_FIELDS);
  mix(uint64_t(count));
  for (int64_t i = 0; i < std::min<int64_t>(count, MOERT_PLAN_LAYER); ++i)
    mix(uint64_t(values[i]));
  return h;
}

Status moert::readPlan(const int64_t *values, int64_t count, PlanFields &out) {
  if (count < MOERT_DISPATCH_PLAN_FIELDS || count > MOERT_DISPATCH_PLAN_FIELDS_MAX)
    return cat("dispatch: the plan has ", count, " fields; expected ",
               int(MOERT_DISPATCH_PLAN_FIELDS), " (or ", int(MOERT_DISPATCH_PLAN_FIELDS) + 1,
               " with the expert count, ", int(MOERT_PLAN_REPLICA_SELECTION) + 1,
               " with the replica selection, ", int(MOERT_DISPATCH_PLAN_FIELDS_MAX),
               " with the layer's fingerprint)");
  if (!values)
    return std::string("dispatch: the plan has a null data pointer");
  out = PlanFields();
  out.count = count;
  out.capacity = values[MOERT_PLAN_CAPACITY];
  out.maxTokens = values[MOERT_PLAN_MAX_TOKENS];
  out.slots = values[MOERT_PLAN_SLOTS];
  out.quantization = values[MOERT_PLAN_QUANTIZATION];
  out.ranks = values[MOERT_PLAN_RANKS];
  out.sendBytes = values[MOERT_PLAN_SEND_BYTES];
  out.recvBytes = values[MOERT_PLAN_RECV_BYTES];
  out.expertRowsBytes = values[MOERT_PLAN_EXPERT_ROWS_BYTES];
  out.combineBytes = values[MOERT_PLAN_COMBINE_BYTES];
  out.experts = count > MOERT_DISPATCH_PLAN_FIELDS ? values[MOERT_PLAN_EXPERTS] : 0;
  out.replicaSelection =
      count > MOERT_PLAN_REPLICA_SELECTION ? values[MOERT_PLAN_REPLICA_SELECTION] : 0;
  out.layer = count > MOERT_PLAN_LAYER ? values[MOERT_PLAN_LAYER] : 0;
  return std::nullopt;
}

static std::string rankCountMismatch(const PlanFields &plan, const DispatchShape &shape) {
  return cat("dispatch: the layer was planned for ", plan.ranks,
             " expert-parallel ranks but runs on ", shape.ranks);
}

Status moert::checkDispatchPlan(const PlanFields &plan, const DispatchShape &shape,
                                DispatchSizes &out) {
  using namespace limits;
  out = DispatchSizes();
  // The call.
  if (shape.elementBytes != 4 && shape.elementBytes != 2)
    return cat("dispatch: element size ", shape.elementBytes,
               " is not 4 (f32) or 2 (bf16)");
  if (shape.ranks < 1 || shape.ranks > kMaxRanks)
    return cat("dispatch: ", shape.ranks, " ranks are outside the runtime's limits [1, ",
               amount(kMaxRanks), "]");
  if (Status e = inRange("tokens (x's rows)", shape.tokens, 0, kMaxTokens, " per rank"))
    return e;
  if (Status e = inRange("hidden size (x's columns)", shape.hidden, 1, kMaxHidden))
    return e;
  if (Status e = inRange("top-k (expert_ids' columns)", shape.topK, 1, kMaxTopK))
    return e;
  const char *map = shape.placed ? "phys_to_log's length" : "expert_rank's length";
  if (Status e = inRange(map, shape.mapLength, 1, kMaxExperts))
    return e;
  // A layer run on another rank count: say so before what follows from it.
  if (plan.ranks > 0 && plan.ranks <= kMaxRanks && plan.ranks != shape.ranks)
    return rankCountMismatch(plan, shape);
  if (shape.mapLength % shape.ranks != 0)
    return shape.placed
               ? cat("placement: ", shape.mapLength, " slots do not divide over ",
                     shape.ranks, " ranks")
               : cat("dispatch: expert_rank has ", shape.mapLength,
                     " experts, which do not divide over ", shape.ranks, " ranks");
  out.expertsPerRank = shape.mapLength / shape.ranks;
  if (out.expertsPerRank > kMaxExpertsPerRank)
    return cat("dispatch: ", out.expertsPerRank,
               " experts per rank do not fit the wire's int16 ids (at most ",
               kMaxExpertsPerRank, ")");

  // The plan's fields, one by one.
  if (Status e = inRange(kFields[MOERT_PLAN_CAPACITY], plan.capacity, 0,
                         kMaxCapacity, " rows"))
    return e;
  if (Status e = inRange(kFields[MOERT_PLAN_MAX_TOKENS], plan.maxTokens, 0,
                         kMaxTokens, " tokens"))
    return e;
  if (Status e = inRange(kFields[MOERT_PLAN_SLOTS], plan.slots, 0, kMaxTokens,
                         " rows"))
    return e;
  if (plan.quantization < 0 || plan.quantization > 2)
    return cat("dispatch: plan names unknown quantization ", plan.quantization,
               " (expected 0 none, 1 fp8g128, 2 fp8g32ue8m0)");
  if (Status e = inRange(kFields[MOERT_PLAN_RANKS], plan.ranks, 0, kMaxRanks))
    return e;
  const int64_t sizes[] = {plan.sendBytes, plan.recvBytes, plan.expertRowsBytes,
                           plan.combineBytes};
  for (int i = 0; i < 4; ++i)
    if (Status e = inRange(kFields[MOERT_PLAN_SEND_BYTES + i], sizes[i], 0,
                           kMaxWorkspaceBytes, " bytes"))
      return e;
  if (plan.count > MOERT_DISPATCH_PLAN_FIELDS) {
    // With the replica selection after it, 0 says "infer it".
    const bool optional = plan.count > MOERT_PLAN_REPLICA_SELECTION;
    if (Status e = inRange(kFields[MOERT_PLAN_EXPERTS], plan.experts, optional ? 0 : 1,
                           kMaxExperts))
      return e;
    if (!shape.placed && plan.experts && plan.experts != shape.mapLength)
      return cat("dispatch: plan field experts = ", plan.experts, " but expert_rank has ",
                 shape.mapLength, " entries");
    if (shape.placed && plan.experts > shape.mapLength)
      return cat("dispatch: plan field experts = ", plan.experts,
                 " but phys_to_log has only ", shape.mapLength,
                 " slots (every expert needs one)");
  }

  if (plan.replicaSelection != 0 && plan.replicaSelection != 1)
    return cat("dispatch: plan field replica_selection = ", plan.replicaSelection,
               " (expected 0 static shares or 1 per batch)");
  if (plan.replicaSelection == 1 && !shape.placed)
    return std::string("dispatch: plan field replica_selection = 1 (per batch) "
                       "needs a placement (the placed entry)");

  // The fields against the call and each other.
  if (plan.ranks && plan.ranks != shape.ranks)
    return rankCountMismatch(plan, shape);
  if (shape.keepCodes && plan.quantization == 0)
    return std::string("dispatch: FP8 codes asked for, but the plan has no quantization");
  const int64_t group = plan.quantization == 1 ? 128 : plan.quantization == 2 ? 32 : 0;
  if (group && shape.hidden % group != 0)
    return cat("dispatch: hidden size ", shape.hidden,
               " is not a multiple of the group size ", group, " of FP8 scheme ",
               plan.quantization == 1 ? "fp8g128" : "fp8g32ue8m0");
  const int64_t limit = plan.slots ? plan.slots : plan.maxTokens;
  if (limit && shape.tokens > limit)
    return cat("dispatch: ", shape.tokens, " tokens but the plan allows at most ", limit,
               " per rank", plan.slots ? " in the decode layout" : "",
               "; nothing was written");

  // Bytes per row. Within the limits above none of these can overflow;
  // they are checked anyway, so that a change of limit cannot make them.
  bool ok = checkedMul(shape.hidden, shape.elementBytes, out.xBytes);
  out.groups = group ? shape.hidden / group : 0;
  const int64_t scaleBytes = plan.quantization == 1 ? out.groups * 4 : out.groups;
  out.wireXBytes = out.xBytes;
  if (group)
    ok &= checkedAdd(shape.hidden, scaleBytes, out.wireXBytes);
  ok &= checkedMul(shape.topK, int64_t(sizeof(int16_t) + sizeof(float)), out.routeBytes);
  ok &= checkedAdd(out.wireXBytes, out.routeBytes, out.rowBytes);
  int64_t codeScales = 0;
  ok &= checkedMul(out.groups, 4, codeScales);
  if (shape.keepCodes) {
    ok &= checkedAdd(shape.hidden, codeScales, out.expertRowBytes);
    out.resultRowBytes = shape.hidden;
  } else {
    out.expertRowBytes = out.resultRowBytes = out.xBytes;
  }
  if (!ok)
    return cat("dispatch: a row of hidden size ", shape.hidden, " and top-k ", shape.topK,
               " overflows int64 bytes");

  // Rows the workspaces must hold: fixed blocks in the decode layout; else
  // each token reaches at most min(ranks, top-k) ranks, and a rank receives
  // at most the capacity.
  const int64_t maxTokens = plan.maxTokens ? plan.maxTokens : shape.tokens;
  const int64_t fanOut = shape.ranks < shape.topK ? shape.ranks : shape.topK;
  if (plan.slots) {
    if (!checkedMul(shape.ranks, plan.slots, out.plannedSendRows))
      return cat("dispatch: ", shape.ranks, " ranks x ", plan.slots,
                 " slots overflows int64 rows");
    out.plannedRecvRows = out.plannedSendRows;
  } else {
    if (!checkedMul(maxTokens, fanOut, out.plannedSendRows))
      return cat("dispatch: ", maxTokens, " tokens x ", fanOut,
                 " destinations overflows int64 rows");
    out.plannedRecvRows = plan.capacity;
  }
  if (Status e = workspace("dispatch.send", plan.sendBytes, out.plannedSendRows,
                           out.rowBytes, out.sendBytes))
    return e;
  if (Status e = workspace("dispatch.recv", plan.recvBytes, out.plannedRecvRows,
                           out.rowBytes, out.recvBytes))
    return e;
  if (Status e = workspace("expert.rows", plan.expertRowsBytes, out.plannedRecvRows,
                           out.expertRowBytes, out.expertRowsBytes))
    return e;
  if (Status e = workspace("combine.recv", plan.combineBytes, out.plannedSendRows,
                           out.xBytes, out.combineBytes))
    return e;
  return std::nullopt;
}

Status moert::checkMemref(const moert_memref2d *m, const char *what, const char *name,
                          int64_t elementBytes) {
  if (!m)
    return cat(what, ": memref '", name, "' is a null descriptor");
  return checkDescriptor(m->aligned, m->offset, m->sizes, m->strides, 2, what, name,
                         elementBytes);
}

Status moert::checkMemref(const moert_memref1d *m, const char *what, const char *name,
                          int64_t elementBytes) {
  if (!m)
    return cat(what, ": memref '", name, "' is a null descriptor");
  return checkDescriptor(m->aligned, m->offset, m->sizes, m->strides, 1, what, name,
                         elementBytes);
}

Status moert::checkDispatchArgs(const DispatchArgs &args, DispatchCheck &out) {
  out = DispatchCheck();
  if (args.elementBytes != 4 && args.elementBytes != 2)
    return cat("dispatch: element size ", args.elementBytes,
               " is not 4 (f32) or 2 (bf16)");
  if (Status e = checkMemref(args.x, "dispatch", args.xElementBytes == 1 ? "codes" : "x",
                             args.xElementBytes ? args.xElementBytes : args.elementBytes))
    return e;
  if (Status e = checkMemref(args.ids, "dispatch", "expert_ids", 4))
    return e;
  if (Status e = checkMemref(args.weights, "dispatch", "expert_weights", 4))
    return e;
  if (args.ids->sizes[0] != args.x->sizes[0] || args.weights->sizes[0] != args.x->sizes[0] ||
      args.weights->sizes[1] != args.ids->sizes[1])
    return cat("dispatch: x [T, H], expert_ids [T, k] and expert_weights [T, k] disagree: x ",
               dims(args.x->sizes, 2), ", expert_ids ", dims(args.ids->sizes, 2),
               ", expert_weights ", dims(args.weights->sizes, 2));
  const bool placed = args.placed;
  if (placed) {
    if (Status e = checkMemref(args.physToLog, "dispatch", "phys_to_log", 4))
      return e;
    if (Status e = checkMemref(args.replicaShare, "dispatch", "replica_share", 4))
      return e;
    if (args.physToLog->sizes[0] != args.replicaShare->sizes[0])
      return cat("dispatch: phys_to_log has ", args.physToLog->sizes[0],
                 " entries but replica_share has ", args.replicaShare->sizes[0]);
  } else if (Status e = checkMemref(args.expertRank, "dispatch", "expert_rank", 4)) {
    return e;
  }
  if (Status e = checkMemref(args.plan, "dispatch", "plan", 8))
    return e;
  const int64_t count = args.plan->sizes[0];
  if (count < MOERT_DISPATCH_PLAN_FIELDS || count > MOERT_DISPATCH_PLAN_FIELDS_MAX)
    return cat("dispatch: the plan must be a dense i64[", int(MOERT_DISPATCH_PLAN_FIELDS),
               "] (or i64[", int(MOERT_DISPATCH_PLAN_FIELDS) + 1, "] with the expert count, i64[",
               int(MOERT_PLAN_REPLICA_SELECTION) + 1, "] with the replica selection, i64[",
               int(MOERT_DISPATCH_PLAN_FIELDS_MAX), "] with the layer's fingerprint), got i64[",
               count, "]");
  if (Status e = readPlan(static_cast<const int64_t *>(args.plan->aligned) +
                              args.plan->offset,
                          count, out.plan))
    return e;
  out.shape.tokens = args.x->sizes[0];
  out.shape.hidden = args.x->sizes[1];
  out.shape.topK = args.ids->sizes[1];
  out.shape.elementBytes = args.elementBytes;
  out.shape.mapLength = placed ? args.physToLog->sizes[0] : args.expertRank->sizes[0];
  out.shape.placed = placed;
  out.shape.keepCodes = args.keepCodes;
  out.shape.ranks = args.ranks;
  return checkDispatchPlan(out.plan, out.shape, out.sizes);
}
