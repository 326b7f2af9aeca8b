//===- PlanCheck.h - a dispatch's plan and shapes, checked ------*- C++ -*-===//
//
// The checks every dispatch runs before it reads a caller's buffer or sizes
// anything: the memref descriptors (null, negative, strided, overflowing),
// the plan's fields against the runtime's stated limits and each other, and
// every workspace product, with checked arithmetic. A pure function of its
// arguments (no MPI, no allocation beyond messages, never reads a tensor's
// data; it reads the plan's values only after its descriptor checked out),
// so that the fuzz target fuzz/runtime_plan_fuzzer.cpp can run it alone.
// The limits are stated in docs/Runtime.md.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_LIB_PLANCHECK_H
#define MOERT_LIB_PLANCHECK_H

#include "moert/moert.h"

#include <cstdint>
#include <optional>
#include <string>

namespace moert {

/// An error message, or nothing on success (as in Communicator.h).
using Status = std::optional<std::string>;

/// What the runtime accepts at run time (docs/Runtime.md, "Limits").
namespace limits {
constexpr int64_t kMaxRanks = int64_t(1) << 16;   ///< communicator and plan ep
constexpr int64_t kMaxExperts = int64_t(1) << 20; ///< E, and P physical slots
constexpr int64_t kMaxHidden = int64_t(1) << 20;  ///< H
constexpr int64_t kMaxTopK = 1024;                ///< k
constexpr int64_t kMaxTokens = int64_t(1) << 31;  ///< T per rank and call; slots
/// Rows a rank may receive (the plan's capacity): tokens x ranks.
constexpr int64_t kMaxCapacity = kMaxTokens * kMaxRanks;
/// Bytes of one workspace (dispatch.send, dispatch.recv, expert.rows,
/// combine.recv), given by the plan or derived from it, and of one result.
constexpr int64_t kMaxWorkspaceBytes = int64_t(1) << 40;
/// Experts one rank may hold: local ids travel as int16.
constexpr int64_t kMaxExpertsPerRank = 32767;
/// The collective timeout ($MOERT_TIMEOUT_MS, moert_init): larger values
/// are clamped to this (one day).
constexpr int64_t kMaxTimeoutMs = int64_t(86400) * 1000;
} // namespace limits

/// Checked arithmetic on sizes: false on overflow (then `out` is unset).
inline bool checkedMul(int64_t a, int64_t b, int64_t &out) {
  return !__builtin_mul_overflow(a, b, &out);
}
inline bool checkedAdd(int64_t a, int64_t b, int64_t &out) {
  return !__builtin_add_overflow(a, b, &out);
}

/// The plan's fields (moert.h, MOERT_PLAN_*); `experts` is the optional 10th
/// field (0: absent, or a 9-field plan), `replicaSelection` the 11th, `layer`
/// the 12th.
struct PlanFields {
  int64_t capacity = 0, maxTokens = 0, slots = 0, quantization = 0, ranks = 0;
  int64_t sendBytes = 0, recvBytes = 0, expertRowsBytes = 0, combineBytes = 0;
  int64_t experts = 0;
  int64_t replicaSelection = 0; ///< the optional 11th field: 1 per batch
  int64_t layer = 0;            ///< the optional 12th field: the layer's fingerprint (0: none)
  int64_t count = MOERT_DISPATCH_PLAN_FIELDS; ///< fields given: 9 to 12
};

/// FNV-1a over the count and the values as given but the layer's
/// fingerprint (its own field of the ranks' agreement), so ranks can compare
/// their plans in one word.
uint64_t planHash(const PlanFields &plan);

/// The call's shapes, as the checks see them.
struct DispatchShape {
  int64_t tokens = 0, hidden = 0, topK = 0;
  int64_t elementBytes = 4; ///< 4 (f32) or 2 (bf16)
  int64_t mapLength = 0;    ///< expert_rank's E, or phys_to_log's P
  bool placed = false;      ///< phys_to_log and replica_share given
  bool keepCodes = false;   ///< the FP8 entry: experts take codes and scales
  int64_t ranks = 1;        ///< the communicator's size
};

/// What the checks derived; every value fits and is within the limits.
struct DispatchSizes {
  int64_t xBytes = 0;         ///< H x element size
  int64_t wireXBytes = 0;     ///< x on the wire: xBytes, or FP8 codes + scales
  int64_t routeBytes = 0;     ///< k x (int16 id + f32 weight)
  int64_t rowBytes = 0;       ///< wireXBytes + routeBytes
  int64_t groups = 0;         ///< FP8 scale groups per row (0: none)
  int64_t expertRowBytes = 0; ///< what the experts get per row
  int64_t resultRowBytes = 0; ///< x of the result per row (codes or elements)
  int64_t plannedSendRows = 0, plannedRecvRows = 0;
  /// The four workspaces, as given by the plan or derived from it.
  int64_t sendBytes = 0, recvBytes = 0, expertRowsBytes = 0, combineBytes = 0;
  int64_t expertsPerRank = 0; ///< mapLength / ranks
};

/// The plan's fields from `count` values (9, 10 with the expert count, 11
/// with the replica selection, 12 with the layer's fingerprint).
Status readPlan(const int64_t *values, int64_t count, PlanFields &out);

/// The plan against the limits, the call's shapes and each other; derives
/// the sizes. Messages start with "dispatch: " and name the field or tensor
/// and its value.
Status checkDispatchPlan(const PlanFields &plan, const DispatchShape &shape,
                         DispatchSizes &out);

/// A memref descriptor of `elementBytes` elements: not null, sizes >= 0,
/// offset >= 0, dense row-major (rows `cols` elements apart), data not null
/// when it has elements, and the extent in bytes within int64 and the
/// address space. `what` prefixes the message ("dispatch").
Status checkMemref(const moert_memref2d *m, const char *what, const char *name,
                   int64_t elementBytes);
Status checkMemref(const moert_memref1d *m, const char *what, const char *name,
                   int64_t elementBytes);

/// One dispatch entry's arguments as compiled code passes them: `expertRank`
/// or (`placed`) `physToLog` with `replicaShare`.
struct DispatchArgs {
  const moert_memref2d *x = nullptr, *ids = nullptr, *weights = nullptr;
  const moert_memref1d *expertRank = nullptr, *physToLog = nullptr,
                       *replicaShare = nullptr, *plan = nullptr;
  bool placed = false;
  int64_t elementBytes = 4;
  /// x's element size when x holds FP8 codes the layer quantized (1); 0: elementBytes.
  int64_t xElementBytes = 0;
  bool keepCodes = false;
  int64_t ranks = 1;
};
struct DispatchCheck {
  PlanFields plan;
  DispatchShape shape;
  DispatchSizes sizes;
};

/// Everything checkable about a dispatch call before its data is read: the
/// descriptors, then the plan (read from `args.plan` once its descriptor is
/// sound), then checkDispatchPlan.
Status checkDispatchArgs(const DispatchArgs &args, DispatchCheck &out);

} // namespace moert

#endif // MOERT_LIB_PLANCHECK_H
