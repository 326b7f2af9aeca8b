//===- ExpertParallel.h - dispatch and combine across EP ranks --*- C++ -*-===//
#ifndef MOERT_LIB_EXPERTPARALLEL_H
#define MOERT_LIB_EXPERTPARALLEL_H

#include "BatchSelection.h"
#include "Collectives.h"
#include "PlanCheck.h"
#include "Quantize.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace moert {

/// One rank's side of a dispatch, in host memory.
struct DispatchInput {
  const uint8_t *x = nullptr; ///< [tokens, hidden], rows `xRowStride` elements apart.
  int64_t tokens = 0, hidden = 0, elementBytes = 4, xRowStride = 0;
  const int32_t *expertIds = nullptr; ///< [tokens, topK], dense.
  const float *weights = nullptr;     ///< [tokens, topK], dense.
  int64_t topK = 0;
  const int32_t *expertRank = nullptr; ///< [experts]: the rank owning each expert.
  int64_t experts = 0;
  /// Or a placement (then expertRank is unused): physToLog[physicalExperts]
  /// and each slot's share of its expert's tokens (see Placement).
  const int32_t *physToLog = nullptr;
  const float *replicaShare = nullptr;
  int64_t physicalExperts = 0;
  int64_t capacity = 0; ///< Most rows this rank may receive (from the plan).
  /// Most tokens any rank may hold in one dispatch (from the plan); 0: only
  /// `capacity` bounds the call. A rank over it fails every rank first.
  int64_t maxTokens = 0;
  /// 0: prefill layout (counts travel first, rows arrive packed). > 0:
  /// decode layout: every rank sends every rank a block of `slots` rows,
  /// valid ones first, the rest masked (ids -1, weights 0, x 0); no counts
  /// travel and the result always has ranks * slots rows.
  int64_t slots = 0;
  int64_t ranks = 0; ///< The group size the plan is for; 0: unchecked.
  /// Static workspace sizes from the compiler (moe-plan-buffers); 0: derive
  /// them from capacity, maxTokens and slots.
  int64_t sendBytes = 0, recvBytes = 0, expertRowsBytes = 0, combineBytes = 0;
  /// The plan's optional expert count (MOERT_PLAN_EXPERTS; 0: absent) and
  /// how many fields the plan had (9 to 12; the plan hash covers them).
  int64_t planExperts = 0, planFieldCount = 9;
  /// The plan's replica selection (MOERT_PLAN_REPLICA_SELECTION): 0 static
  /// shares, 1 per batch (BatchSelection.h; replicaShare is not read).
  int64_t replicaSelection = 0;
  /// The layer's fingerprint (MOERT_PLAN_LAYER; 0: none): ranks must agree.
  int64_t planLayer = 0;
  /// None: rows travel in the element type. FP8: each row travels as
  /// [H FP8 bytes][scales][ids][weights] and the receiver dequantizes it
  /// into the element type; `hidden` must be a multiple of the group size.
  QuantScheme quant = QuantScheme::None;
  /// With FP8: hand the received E4M3 codes and f32 scales to the experts
  /// instead of dequantizing (DispatchOutput::x gets H bytes per row).
  bool keepCodes = false;
};

/// Where the received rows go; allocated once their number is known.
struct DispatchOutput {
  uint8_t *x = nullptr;         ///< [rows, hidden]
  int32_t *localIds = nullptr;  ///< [rows, topK]: local expert index, or -1
  float *weights = nullptr;     ///< [rows, topK]: 0 where localIds is -1
  float *scales = nullptr;      ///< [rows, hidden / group] with keepCodes
};
using DispatchAllocator = std::function<DispatchOutput(int64_t rows)>;

/// Dispatch sends each token once per destination rank (with the local expert
/// ids and weights that rank needs); counts travel first, then the payload
/// (or, in the decode layout, fixed blocks only). Combine sends each received
/// row's partial result back, and the token's rank adds them. The send,
/// receive and combine workspaces are sized from the plan (capacity, maximum
/// tokens, slots) and reused; every request is checked against them first.
class ExpertParallel {
public:
  explicit ExpertParallel(Collectives &collectives) : coll(collectives) {}

  /// Checks `in` (PlanCheck: plan, limits, workspace products; then the
  /// ids and maps) and fails every rank together on any problem, before any
  /// payload is written. The allocator runs before the payload travels; a
  /// null result is an error of every rank.
  Status dispatch(const DispatchInput &in, const DispatchAllocator &allocate,
                  int64_t &rows, int64_t &handle);
  /// `partial` is [rows, hidden] in the received order; `y` is [tokens, hidden].
  Status combine(int64_t handle, const uint8_t *partial, int64_t rows,
                 uint8_t *y, int64_t &tokens);
  /// Number of tokens of a dispatch still waiting for its combine.
  int64_t tokensOf(int64_t handle) const;
  /// A combine's arguments against its dispatch (handle in flight, rows
  /// delivered, hidden size, element size); sets the dispatch's tokens.
  /// A local check: callers fail every rank with failTogether.
  Status checkCombine(int64_t handle, int64_t rows, int64_t hidden,
                      int64_t elementBytes, int64_t &tokens) const;

private:
  struct InFlight {
    bool live = false;
    int64_t tokens = 0, hidden = 0, elementBytes = 0;
    CallSignature signature; ///< the dispatch's; combine carries it too
    int64_t slots = 0;                           ///< 0: prefill layout
    int64_t plannedCombineBytes = 0;             ///< the combine workspace
    std::vector<int64_t> sentRows, receivedRows; ///< valid rows per peer
    std::vector<int32_t> sentToken;              ///< token of each sent row
    /// When the dispatch returned: the layer's compute on this rank runs
    /// from then until its combine starts (counted as compute_ns).
    Clock::time_point dispatched;
    int64_t dispatchedCpuNs = 0; ///< process CPU time then (all threads)
    /// Rows that travel to / from each peer: the valid ones, or whole blocks.
    int64_t sendBlock(int peer) const { return slots ? slots : sentRows[peer]; }
    int64_t recvBlock(int peer) const { return slots ? slots : receivedRows[peer]; }
  };
  /// A workspace: allocated (not zero-filled) to the plan's size once.
  struct Workspace {
    std::unique_ptr<uint8_t[]> bytes;
    int64_t size = 0;
    uint8_t *data() { return bytes.get(); }
  };
  /// Checks the request against the planned size, then grows `space` to it
  /// (an allocation failure is an error, not an exception).
  Status reserve(Workspace &space, const char *name, int64_t planned, int64_t requested);
  Collectives &coll;
  std::vector<InFlight> inFlight;
  Workspace sendSpace, recvSpace, combineSpace;
  std::vector<float> sumSpace; ///< combine's f32 sums of bf16 rows
};

/// Replicas chosen per batch: all-gathers every rank's choices per expert
/// ("dispatch.expert_counts"; `expertIds` are this rank's `choices` ids,
/// checked) and splits them (selectReplicas); `before` gets the choices of
/// each expert on the ranks before this one. A failure here fails every
/// rank at `nextCollective`, the one the others go on to.
Status selectForBatch(Collectives &coll, const int32_t *expertIds, int64_t choices,
                      const Placement &placement, const char *nextCollective,
                      std::optional<BatchSelection> &selection, std::vector<int64_t> &before);

/// The prefill layout's counts: this rank sends `sentRows[p]` rows to rank p
/// ("dispatch.counts") and learns `receivedRows[p]`, what rank p sends here.
/// A count is never trusted; every rank learns every rank's load
/// ("dispatch.capacity"), so that a rank over `capacity` fails all of them
/// with the same message before any payload moves.
Status exchangeCounts(Collectives &coll, const int64_t *sentRows, int64_t *receivedRows,
                      int64_t capacity);

/// The plan's part of a call's signature: its hash and, where it has one,
/// the layer's fingerprint (a field of its own).
void setPlanSignature(CallSignature &signature, const PlanFields &plan);

/// Element conversions for the payload types (f32, bf16).
float loadElement(const uint8_t *p, int64_t elementBytes);
void storeElement(uint8_t *p, int64_t elementBytes, float value);

} // namespace moert

#endif // MOERT_LIB_EXPERTPARALLEL_H
