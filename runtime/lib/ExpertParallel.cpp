//===- ExpertParallel.cpp - dispatch and combine across EP ranks ----------===//
#include "ExpertParallel.h"
#include "Message.h"
#include "PlanCheck.h"
#include "Placement.h"

#include <algorithm>
#include <cstring>
#include <sstream>

using namespace moert;

namespace {
// Inline in this file: the exported functions are called through the PLT,
// which would cost a call per element in the combine's sums.
inline float load(const uint8_t *p, int64_t elementBytes) {
  if (elementBytes == 4) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t half;
  std::memcpy(&half, p, 2);
  uint32_t bits = uint32_t(half) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline void store(uint8_t *p, int64_t elementBytes, float value) {
  if (elementBytes == 4) {
    std::memcpy(p, &value, 4);
    return;
  }
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  uint16_t half;
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN stays a quiet NaN
    half = uint16_t((bits >> 16) | 0x40);
  else // round to nearest, ties to even
    half = uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  std::memcpy(p, &half, 2);
}

/// acc[h] += row[h] for h < n, row in the element type (vectorizes).
void addRow(float *acc, const uint8_t *row, int64_t n, int64_t elementBytes) {
  if (elementBytes == 4) {
    for (int64_t h = 0; h < n; ++h)
      acc[h] += load(row + 4 * h, 4);
  } else {
    for (int64_t h = 0; h < n; ++h)
      acc[h] += load(row + 2 * h, 2);
  }
}
} // namespace

float moert::loadElement(const uint8_t *p, int64_t elementBytes) {
  return load(p, elementBytes);
}

void moert::setPlanSignature(CallSignature &signature, const PlanFields &plan) {
  signature.set(CallSignature::PlanHash, int64_t(planHash(plan)));
  if (plan.layer) // 0: the plan has none (the plan hash still sees its field count)
    signature.set(CallSignature::Layer, plan.layer);
}

void moert::storeElement(uint8_t *p, int64_t elementBytes, float value) {
  store(p, elementBytes, value);
}

namespace {
PlanFields planOf(const DispatchInput &in) {
  PlanFields plan;
  plan.capacity = in.capacity;
  plan.maxTokens = in.maxTokens;
  plan.slots = in.slots;
  plan.quantization = int64_t(in.quant);
  plan.ranks = in.ranks;
  plan.sendBytes = in.sendBytes;
  plan.recvBytes = in.recvBytes;
  plan.expertRowsBytes = in.expertRowsBytes;
  plan.combineBytes = in.combineBytes;
  plan.experts = in.planExperts;
  plan.replicaSelection = in.replicaSelection;
  plan.layer = in.planLayer;
  plan.count = in.planFieldCount > MOERT_PLAN_LAYER || in.planLayer ? MOERT_DISPATCH_PLAN_FIELDS_MAX
               : in.planFieldCount > MOERT_PLAN_REPLICA_SELECTION || in.replicaSelection
                   ? MOERT_PLAN_REPLICA_SELECTION + 1
               : in.planFieldCount > MOERT_DISPATCH_PLAN_FIELDS || in.planExperts
                   ? MOERT_DISPATCH_PLAN_FIELDS + 1
                   : MOERT_DISPATCH_PLAN_FIELDS;
  return plan;
}

DispatchShape shapeOf(const DispatchInput &in, int ranks) {
  DispatchShape shape;
  shape.tokens = in.tokens;
  shape.hidden = in.hidden;
  shape.topK = in.topK;
  shape.elementBytes = in.elementBytes;
  shape.placed = in.physToLog != nullptr;
  shape.mapLength = shape.placed ? in.physicalExperts : in.experts;
  shape.keepCodes = in.keepCodes;
  shape.ranks = ranks;
  return shape;
}

/// The layer as this call sees it: ranks must agree on all of it.
CallSignature signatureOf(const PlanFields &plan, const DispatchShape &shape) {
  CallSignature s;
  s.set(CallSignature::Hidden, shape.hidden);
  s.set(CallSignature::TopK, shape.topK);
  s.set(CallSignature::Dtype, shape.elementBytes);
  s.set(CallSignature::Quantization, plan.quantization);
  s.set(CallSignature::Ep, plan.ranks);
  s.set(CallSignature::Experts, shape.mapLength);
  s.set(CallSignature::Entry, (shape.placed ? 1 : 0) | (shape.keepCodes ? 2 : 0));
  setPlanSignature(s, plan);
  return s;
}

/// A local precondition that some rank may fail, checked before any
/// collective of the dispatch so that every rank fails together: the maps
/// and every expert id. Builds the placement on the way. The shapes and the
/// plan were checked (checkDispatchPlan) before.
Status localProblem(const DispatchInput &in, int ranks, Placement &placement) {
  const bool perBatch = in.replicaSelection == 1;
  if ((in.tokens * in.topK > 0 && (!in.expertIds || !in.weights || !in.x)) ||
      (in.physToLog ? !in.replicaShare && !perBatch : !in.expertRank))
    return std::string("dispatch: a null buffer");
  if (Status e = in.physToLog
                     ? Placement::fromReplicas(in.physToLog,
                                               perBatch ? nullptr : in.replicaShare,
                                               in.physicalExperts, ranks, in.planExperts,
                                               placement)
                     : Placement::fromExpertRank(in.expertRank, in.experts, ranks, placement))
    return e;
  const int64_t experts = placement.experts();
  for (int64_t i = 0; i < in.tokens * in.topK; ++i)
    if (in.expertIds[i] < 0 || in.expertIds[i] >= experts) {
      MessageStream os;
      os << "dispatch: expert_ids[" << i / in.topK << "," << i % in.topK
         << "] = " << in.expertIds[i] << " is not an expert of the " << experts
         << " (ids 0 to " << experts - 1 << ")";
      return os.str();
    }
  return std::nullopt;
}

std::string outOfMemory(const char *what, const std::exception &e) {
  return std::string(what) + ": out of memory (" + e.what() + ")";
}
} // namespace

Status ExpertParallel::reserve(Workspace &space, const char *name, int64_t planned,
                               int64_t requested) {
  Counters &counters = coll.counters();
  counters.notePlan(name, planned);
  if (requested < 0 || requested > planned)
    return std::string("workspace '") + name + "': " + std::to_string(requested) +
           " bytes requested but the plan sized it for " + std::to_string(planned) +
           "; nothing was written";
  if (space.size < planned) {
    // Not zero-filled: only the pages the rows use are touched.
    space.bytes.reset(new (std::nothrow) uint8_t[size_t(planned)]);
    space.size = space.bytes ? planned : 0;
    if (!space.bytes)
      return std::string("workspace '") + name + "': cannot allocate the planned " +
             std::to_string(planned) + " bytes (out of memory)";
  }
  counters.noteBuffer(name, requested);
  return std::nullopt;
}

Status moert::selectForBatch(Collectives &coll, const int32_t *expertIds, int64_t choices,
                             const Placement &placement, const char *nextCollective,
                             std::optional<BatchSelection> &selection,
                             std::vector<int64_t> &before) {
  const int ranks = coll.size();
  const int64_t experts = placement.experts();
  std::vector<int64_t> mine, all;
  try {
    mine.assign(size_t(experts), 0);
    all.assign(size_t(experts) * ranks, 0);
    before.assign(size_t(experts), 0);
  } catch (const std::exception &e) {
    return coll.failTogether("dispatch.expert_counts",
                             outOfMemory("dispatch: replica selection", e));
  }
  for (int64_t i = 0; i < choices; ++i)
    if (expertIds[i] >= 0) // the all-gather's masked choices
      ++mine[expertIds[i]];
  if (Status e = coll.allGather("dispatch.expert_counts", mine.data(),
                                experts * int64_t(sizeof(int64_t)), all.data()))
    return e;
  // Every rank checks the same counts, so a bad one fails all of them alike.
  // The sum of them all bounds every sum the selection forms.
  std::vector<int64_t> total(size_t(experts), 0);
  int64_t everything = 0;
  for (int r = 0; r < ranks; ++r)
    for (int64_t e = 0; e < experts; ++e) {
      int64_t count = all[r * experts + e];
      if (count < 0 || !checkedAdd(total[e], count, total[e]) ||
          !checkedAdd(everything, count, everything)) {
        MessageStream os;
        os << "dispatch: rank " << r << " announced " << count << " choices of expert "
           << e << " (replica selection); nothing was written";
        return os.str();
      }
      if (r < coll.rank())
        before[e] += count;
    }
  try {
    selection = selectReplicas(placement, total, ranks);
  } catch (const std::exception &e) {
    // The others go on to their next collective, whose agreement carries this.
    return coll.failTogether(nextCollective, outOfMemory("dispatch: replica selection", e));
  }
  const int64_t perRank = placement.slotsPerRank();
  int64_t here = 0;
  for (int64_t p = coll.rank() * perRank; p < (coll.rank() + 1) * perRank; ++p)
    here += selection->slotChoices[p];
  Counters &counters = coll.counters();
  counters.totals["replica_selection_peak_choices"] += selection->peak;
  counters.totals["replica_selection_choices_here"] += here;
  return std::nullopt;
}

Status moert::exchangeCounts(Collectives &coll, const int64_t *sentRows, int64_t *receivedRows,
                             int64_t capacity) {
  const int ranks = coll.size();
  std::vector<int64_t> countBytes(ranks, sizeof(int64_t));
  if (Status e = coll.allToAllV("dispatch.counts", sentRows, countBytes.data(), receivedRows,
                                countBytes.data()))
    return e;
  // A count is never trusted: it sizes what follows.
  int64_t received = 0;
  for (int p = 0; p < ranks; ++p)
    if (receivedRows[p] < 0 || !checkedAdd(received, receivedRows[p], received)) {
      MessageStream os;
      os << "dispatch: rank " << p << " announced " << receivedRows[p] << " rows for rank "
         << coll.rank() << " (the rows so far: " << received << ")";
      return coll.failTogether("dispatch.capacity", os.str());
    }
  // Every rank learns every rank's load, so an overflow fails all of them
  // with the same message, before any payload is written.
  std::vector<int64_t> loads(ranks, 0);
  loads[coll.rank()] = received;
  if (Status e = coll.allReduce("dispatch.capacity", loads.data(), ranks, ReduceOp::Sum))
    return e;
  for (int r = 0; r < ranks; ++r)
    if (loads[r] > capacity || loads[r] < 0) {
      MessageStream os;
      os << "dispatch: rank " << r << " would receive " << loads[r]
         << " rows but the plan's capacity is " << capacity << " rows; nothing was written";
      return os.str();
    }
  return std::nullopt;
}

Status ExpertParallel::dispatch(const DispatchInput &in,
                                const DispatchAllocator &allocate,
                                int64_t &rows, int64_t &handle) {
  Counters &counters = coll.counters();
  PhaseTimer timer{counters, "dispatch"};
  const int ranks = coll.size();
  // Every collective of this dispatch carries the layer's signature, so
  // ranks running different layers fail at the first one, naming the field.
  const PlanFields plan = planOf(in);
  const DispatchShape shape = shapeOf(in, ranks);
  Collectives::SignatureScope scope(coll, signatureOf(plan, shape));
  DispatchSizes sz;
  if (Status e = checkDispatchPlan(plan, shape, sz))
    return coll.failTogether("dispatch", *e);
  Placement placement;
  if (Status e = localProblem(in, ranks, placement))
    return coll.failTogether("dispatch", *e);

  // Replicas chosen per batch: from every rank's choices per expert.
  std::optional<BatchSelection> selection;
  std::vector<int64_t> before;
  if (in.replicaSelection == 1)
    if (Status e =
            selectForBatch(coll, in.expertIds, in.tokens * in.topK, placement,
                           in.slots ? "dispatch.payload" : "dispatch.counts", selection, before))
      return e;

  // The slot of each (token, choice): the n-th choice of an expert here
  // goes to the replica the placement picks for n (static shares) or the
  // next one the batch's selection has room in. One row per (token,
  // destination rank), grouped by destination.
  const int64_t perRank = placement.slotsPerRank();
  const int64_t choices = in.tokens * in.topK; // within the limits: < 2^42
  std::vector<int32_t> slotOf;
  std::vector<std::vector<int32_t>> tokensFor(ranks);
  InFlight state;
  try {
    slotOf.resize(size_t(choices));
    if (selection) {
      SlotCursor cursor(placement, *selection, before);
      for (int64_t i = 0; i < choices; ++i)
        slotOf[i] = cursor.next(in.expertIds[i]);
    } else {
      std::vector<int64_t> seen(placement.experts(), 0);
      for (int64_t i = 0; i < choices; ++i)
        slotOf[i] = placement.choose(in.expertIds[i], seen[in.expertIds[i]]++);
    }
    std::vector<bool> hit(ranks, false);
    for (int64_t t = 0; t < in.tokens; ++t) {
      std::fill(hit.begin(), hit.end(), false);
      for (int64_t j = 0; j < in.topK; ++j)
        hit[slotOf[t * in.topK + j] / perRank] = true;
      for (int d = 0; d < ranks; ++d)
        if (hit[d])
          tokensFor[d].push_back(int32_t(t));
    }
    state.live = true;
    state.tokens = in.tokens;
    state.hidden = in.hidden;
    state.elementBytes = in.elementBytes;
    state.slots = in.slots;
    state.signature = signatureOf(plan, shape);
    state.sentRows.resize(ranks);
    state.receivedRows.assign(ranks, in.slots);
    for (int d = 0; d < ranks; ++d) {
      state.sentRows[d] = int64_t(tokensFor[d].size());
      state.sentToken.insert(state.sentToken.end(), tokensFor[d].begin(),
                             tokensFor[d].end());
    }
  } catch (const std::exception &e) {
    return coll.failTogether("dispatch", outOfMemory("dispatch: routing", e));
  }

  if (!in.slots) // counts first: everyone learns how many rows it will receive
    if (Status e =
            exchangeCounts(coll, state.sentRows.data(), state.receivedRows.data(), in.capacity))
      return e;
  // Rows and bytes: rows are bounded by the capacity (checked above) or by
  // ranks x slots, but every product is checked all the same.
  int64_t sendRows = 0, recvRows = 0, sendTotal = 0, recvTotal = 0, expertTotal = 0;
  bool fits = true;
  for (int p = 0; p < ranks; ++p) {
    fits &= checkedAdd(sendRows, state.sendBlock(p), sendRows);
    fits &= checkedAdd(recvRows, state.recvBlock(p), recvRows);
  }
  fits = fits && checkedMul(sendRows, sz.rowBytes, sendTotal) &&
         checkedMul(recvRows, sz.rowBytes, recvTotal) &&
         checkedMul(recvRows, sz.expertRowBytes, expertTotal);
  if (!fits)
    return coll.failTogether("dispatch.payload",
                             "dispatch: " + std::to_string(recvRows) +
                                 " rows of " + std::to_string(sz.rowBytes) +
                                 " bytes overflow int64");
  state.plannedCombineBytes = sz.combineBytes;
  if (Status e = reserve(sendSpace, "dispatch.send", sz.sendBytes, sendTotal))
    return coll.failTogether("dispatch.payload", *e);
  if (Status e = reserve(recvSpace, "dispatch.recv", sz.recvBytes, recvTotal))
    return coll.failTogether("dispatch.payload", *e);
  // What the experts get per row: activations, or codes and f32 scales.
  const bool quantized = in.quant != QuantScheme::None;
  const bool keepCodes = quantized && in.keepCodes;
  if (expertTotal > sz.expertRowsBytes)
    return coll.failTogether(
        "dispatch.payload",
        "workspace 'expert.rows': " + std::to_string(expertTotal) +
            " bytes requested but the plan sized it for " +
            std::to_string(sz.expertRowsBytes) + "; nothing was written");
  // The results, before the payload travels: a rank that cannot hold them
  // fails every rank now, not after the others went on to compute.
  DispatchOutput dest;
  try {
    dest = allocate(recvRows);
  } catch (const std::exception &e) {
    return coll.failTogether("dispatch.payload", outOfMemory("dispatch: results", e));
  }
  if (recvRows && (!dest.x || !dest.localIds || !dest.weights || (keepCodes && !dest.scales)))
    return coll.failTogether("dispatch.payload",
                             "dispatch: cannot allocate the results for " +
                                 std::to_string(recvRows) + " rows (out of memory)");

  // A token going to several ranks is quantized once per destination; the
  // result is the same bytes each time. Masked rows are zero bytes: x = 0,
  // weights 0, ids -1 (written below).
  const int64_t xBytes = sz.xBytes, wireXBytes = sz.wireXBytes, rowBytes = sz.rowBytes;
  std::vector<float> values(quantized ? in.hidden : 0);
  std::vector<int16_t> ids(in.topK);
  std::vector<float> weights(in.topK);
  uint8_t *out = sendSpace.data();
  for (int d = 0; d < ranks; ++d) {
    for (int32_t t : tokensFor[d]) {
      const uint8_t *x = in.x + t * in.xRowStride * in.elementBytes;
      if (quantized) {
        for (int64_t h = 0; h < in.hidden; ++h)
          values[h] = load(x + h * in.elementBytes, in.elementBytes);
        quantizeRow(in.quant, values.data(), in.hidden, out, out + in.hidden);
      } else {
        std::memcpy(out, x, xBytes);
      }
      for (int64_t j = 0; j < in.topK; ++j) {
        int32_t slot = slotOf[t * in.topK + j];
        bool mine = slot / perRank == d;
        ids[j] = mine ? int16_t(slot % perRank) : int16_t(-1);
        weights[j] = mine ? in.weights[t * in.topK + j] : 0.0f;
      }
      // memcpy: with UE8M0 scales the ids need not be aligned.
      std::memcpy(out + wireXBytes, ids.data(), in.topK * sizeof(int16_t));
      std::memcpy(out + wireXBytes + in.topK * sizeof(int16_t), weights.data(),
                  in.topK * sizeof(float));
      out += rowBytes;
    }
    for (int64_t pad = state.sentRows[d]; pad < state.sendBlock(d); ++pad) {
      std::memset(out, 0, rowBytes);
      std::fill(ids.begin(), ids.end(), -1);
      std::memcpy(out + wireXBytes, ids.data(), in.topK * sizeof(int16_t));
      out += rowBytes;
    }
  }
  std::vector<int64_t> sendBytes(ranks), recvBytes(ranks);
  for (int p = 0; p < ranks; ++p) {
    sendBytes[p] = state.sendBlock(p) * rowBytes; // <= sendTotal: no overflow
    recvBytes[p] = state.recvBlock(p) * rowBytes;
  }
  // A rank told to skip the payload (a test hook) receives nothing: its rows
  // read as masked (ids -1) so that the other ranks report the skip itself.
  if (coll.injectedSkip("dispatch.payload"))
    std::memset(recvSpace.data(), 0xFF, size_t(recvTotal));
  if (Status e = coll.allToAllV("dispatch.payload", sendSpace.data(),
                                sendBytes.data(), recvSpace.data(),
                                recvBytes.data()))
    return e;

  // The local ids index this rank's expert weights in compiled code: one
  // outside [-1, experts here) never reaches it. The other ranks have gone
  // on to their experts; they learn at the combine's collective.
  for (int64_t r = 0; r < recvRows; ++r) {
    std::memcpy(ids.data(), recvSpace.data() + r * rowBytes + wireXBytes,
                in.topK * sizeof(int16_t));
    for (int64_t j = 0; j < in.topK; ++j)
      if (ids[j] < -1 || ids[j] >= perRank) {
        MessageStream os;
        os << "dispatch: received row " << r << " names local expert " << ids[j]
           << " (choice " << j << "), outside [-1, " << perRank
           << "): the ranks' expert maps disagree";
        return coll.failTogether("combine.payload", os.str());
      }
  }
  for (int64_t r = 0; r < recvRows; ++r) {
    const uint8_t *row = recvSpace.data() + r * rowBytes;
    if (keepCodes) {
      std::memcpy(dest.x + r * in.hidden, row, in.hidden);
      decodeScales(in.quant, row + in.hidden, in.hidden, dest.scales + r * sz.groups);
    } else if (quantized) {
      dequantizeRow(in.quant, row, row + in.hidden, in.hidden, values.data());
      uint8_t *x = dest.x + r * xBytes;
      for (int64_t h = 0; h < in.hidden; ++h)
        store(x + h * in.elementBytes, in.elementBytes, values[h]);
    } else {
      std::memcpy(dest.x + r * xBytes, row, xBytes);
    }
    std::memcpy(ids.data(), row + wireXBytes, in.topK * sizeof(int16_t));
    for (int64_t j = 0; j < in.topK; ++j)
      dest.localIds[r * in.topK + j] = ids[j];
    std::memcpy(dest.weights + r * in.topK,
                row + wireXBytes + in.topK * sizeof(int16_t), in.topK * sizeof(float));
  }
  counters.notePlan("expert.rows", sz.expertRowsBytes);
  counters.noteBuffer("expert.rows", expertTotal);
  // The load the experts here got: (token, choice) pairs, masked ones not.
  int64_t received = 0;
  for (int64_t i = 0; i < recvRows * in.topK; ++i)
    received += dest.localIds[i] >= 0;
  counters.totals["expert_choices_received"] += received;
  counters.totals["dispatch_rows_sent"] += int64_t(state.sentToken.size());
  counters.totals["dispatch_payload_bytes_sent"] += sendTotal;
  counters.totals["dispatch_bytes_per_token_expert_pair"] +=
      in.tokens * in.topK * (wireXBytes + int64_t(sizeof(int16_t) + sizeof(float)));
  // The scheme of the latest dispatch (QuantScheme's value; 0 = none), and
  // what its rows would have cost in the element type.
  counters.totals["dispatch_quantization"] = int64_t(in.quant);
  counters.totals["dispatch_payload_bytes_unquantized"] +=
      sendRows * (xBytes + sz.routeBytes);
  counters.totals[in.slots ? "dispatch_calls_decode" : "dispatch_calls_prefill"] += 1;

  rows = recvRows;
  for (handle = 0; handle < int64_t(inFlight.size()); ++handle)
    if (!inFlight[handle].live)
      break;
  if (handle == int64_t(inFlight.size()))
    inFlight.emplace_back();
  inFlight[handle] = std::move(state);
  inFlight[handle].dispatched = Clock::now();
  inFlight[handle].dispatchedCpuNs = processCpuNs();
  return std::nullopt;
}

int64_t ExpertParallel::tokensOf(int64_t handle) const {
  if (handle < 0 || handle >= int64_t(inFlight.size()) || !inFlight[handle].live)
    return -1;
  return inFlight[handle].tokens;
}

Status ExpertParallel::checkCombine(int64_t handle, int64_t rows, int64_t hidden,
                                    int64_t elementBytes, int64_t &tokens) const {
  if (tokensOf(handle) < 0)
    return "combine: handle " + std::to_string(handle) +
           " does not name a dispatch in flight";
  const InFlight &state = inFlight[handle];
  int64_t expectedRows = 0;
  for (int p = 0; p < coll.size(); ++p)
    expectedRows += state.recvBlock(p); // each <= capacity: checked at dispatch
  if (rows != expectedRows)
    return "combine: partial has " + std::to_string(rows) +
           " rows but dispatch delivered " + std::to_string(expectedRows);
  if (hidden != state.hidden)
    return "combine: partial has hidden size " + std::to_string(hidden) +
           " but the dispatch (handle " + std::to_string(handle) + ") had " +
           std::to_string(state.hidden);
  if (elementBytes != state.elementBytes)
    return std::string("combine: partial is ") + (elementBytes == 4 ? "f32" : "bf16") +
           " but the dispatch (handle " + std::to_string(handle) + ") was " +
           (state.elementBytes == 4 ? "f32" : "bf16");
  tokens = state.tokens;
  return std::nullopt;
}

Status ExpertParallel::combine(int64_t handle, const uint8_t *partial,
                               int64_t rows, uint8_t *y, int64_t &tokens) {
  Counters &counters = coll.counters();
  PhaseTimer timer{counters, "combine"};
  if (tokensOf(handle) < 0)
    return coll.failTogether("combine.payload",
                             "combine: handle " + std::to_string(handle) +
                                 " does not name a dispatch in flight");
  InFlight state = std::move(inFlight[handle]);
  inFlight[handle].live = false;
  // The layer's compute on this rank: from the end of the dispatch to the
  // start of its combine (summed over calls), so the share of the layer's
  // time spent in transfers can be computed from the counters.
  counters.noteCompute(timer.start - state.dispatched,
                       processCpuNs() - state.dispatchedCpuNs);
  Collectives::SignatureScope scope(coll, state.signature);
  const int ranks = coll.size();
  int64_t expectedRows = 0, backRows = 0;
  for (int p = 0; p < ranks; ++p) {
    expectedRows += state.recvBlock(p);
    backRows += state.sendBlock(p);
  }
  if (rows != expectedRows)
    return coll.failTogether("combine.payload",
                             "combine: partial has " + std::to_string(rows) +
                                 " rows but dispatch delivered " +
                                 std::to_string(expectedRows));
  if ((rows && !partial) || (state.tokens && !y))
    return coll.failTogether("combine.payload", "combine: a null buffer");

  // Each product is at most a planned workspace or the caller's buffer;
  // checked all the same.
  const int64_t xBytes = state.hidden * state.elementBytes;
  int64_t backBytes = 0, elements = 0;
  if (!checkedMul(backRows, xBytes, backBytes) ||
      !checkedMul(state.tokens, state.hidden, elements))
    return coll.failTogether("combine.payload", "combine: sizes overflow int64");
  if (Status e = reserve(combineSpace, "combine.recv", state.plannedCombineBytes,
                         backBytes))
    return coll.failTogether("combine.payload", *e);
  // f32 sums go straight into y; bf16 ones into f32 first (sumSpace,
  // reused across calls).
  const bool direct = state.elementBytes == 4;
  try {
    if (!direct && int64_t(sumSpace.size()) < elements)
      sumSpace.resize(size_t(elements));
  } catch (const std::exception &e) {
    return coll.failTogether("combine.payload", outOfMemory("combine: sums", e));
  }
  std::vector<int64_t> sendBytes(ranks), recvBytes(ranks);
  for (int p = 0; p < ranks; ++p) {
    sendBytes[p] = state.recvBlock(p) * xBytes;
    recvBytes[p] = state.sendBlock(p) * xBytes;
  }
  if (Status e = coll.allToAllV("combine.payload", partial, sendBytes.data(),
                                combineSpace.data(), recvBytes.data()))
    return e;

  // Rows come back grouped by the rank that computed them, in rank order:
  // adding them in that order makes the sum the same on every run. In the
  // decode layout each block's masked tail is skipped.
  // The same additions in the same order either way, from 0.
  float *sum = direct ? reinterpret_cast<float *>(y) : sumSpace.data();
  if (elements)
    std::memset(sum, 0, size_t(elements) * sizeof(float));
  const uint8_t *block = combineSpace.data();
  const int32_t *token = state.sentToken.data();
  for (int p = 0; p < ranks; ++p) {
    for (int64_t r = 0; r < state.sentRows[p]; ++r, ++token)
      addRow(sum + *token * state.hidden, block + r * xBytes, state.hidden,
             state.elementBytes);
    block += state.sendBlock(p) * xBytes;
  }
  if (!direct)
    for (int64_t i = 0; i < elements; ++i)
      store(y + i * state.elementBytes, state.elementBytes, sum[i]);
  tokens = state.tokens;
  return std::nullopt;
}
