//===- ExpertParallel.cpp - dispatch and combine across EP ranks ----------===//
#include "ExpertParallel.h"
#include "Placement.h"

#include <algorithm>
#include <cstring>
#include <sstream>

using namespace moert;

float moert::loadElement(const uint8_t *p, int64_t elementBytes) {
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

void moert::storeElement(uint8_t *p, int64_t elementBytes, float value) {
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

namespace {
struct Timer {
  Counters &counters;
  const char *phase;
  Clock::time_point start = Clock::now();
  ~Timer() {
    counters.phaseSeconds[phase] +=
        std::chrono::duration<double>(Clock::now() - start).count();
  }
};

/// A local precondition that some rank may fail, checked before any
/// collective of the dispatch so that every rank fails together. Builds the
/// placement (from the replicas or from expert_rank) on the way.
Status localProblem(const DispatchInput &in, int ranks, Placement &placement) {
  if (in.ranks && in.ranks != ranks)
    return "dispatch: the layer was planned for " + std::to_string(in.ranks) +
           " expert-parallel ranks but runs on " + std::to_string(ranks);
  if (in.elementBytes != 4 && in.elementBytes != 2)
    return "dispatch: element size must be 4 (f32) or 2 (bf16)";
  if (in.quant != QuantScheme::None)
    if (Status e = checkQuantShape(in.quant, in.hidden))
      return "dispatch: " + *e;
  if (Status e = in.physToLog ? Placement::fromReplicas(in.physToLog, in.replicaShare,
                                                        in.physicalExperts, ranks, placement)
                              : Placement::fromExpertRank(in.expertRank, in.experts, ranks,
                                                          placement))
    return e;
  for (int64_t i = 0; i < in.tokens * in.topK; ++i)
    if (in.expertIds[i] < 0 || in.expertIds[i] >= placement.experts()) {
      std::ostringstream os;
      os << "dispatch: expert_ids[" << i / in.topK << "," << i % in.topK
         << "] = " << in.expertIds[i] << " is not an expert in [0, "
         << placement.experts() << ")";
      return os.str();
    }
  if (placement.slotsPerRank() > INT16_MAX)
    return "dispatch: " + std::to_string(placement.slotsPerRank()) +
           " experts per rank do not fit the wire's int16 ids";
  const int64_t limit = in.slots ? in.slots : in.maxTokens;
  if (limit && in.tokens > limit) {
    std::ostringstream os;
    os << "dispatch: " << in.tokens << " tokens but the plan allows at most "
       << limit << " per rank" << (in.slots ? " in the decode layout" : "")
       << "; nothing was written";
    return os.str();
  }
  return std::nullopt;
}
} // namespace

Status ExpertParallel::reserve(std::vector<uint8_t> &space, const char *name,
                               int64_t planned, int64_t requested) {
  Counters &counters = coll.counters();
  counters.notePlan(name, planned);
  if (requested > planned)
    return std::string("workspace '") + name + "': " + std::to_string(requested) +
           " bytes requested but the plan sized it for " + std::to_string(planned) +
           "; nothing was written";
  if (int64_t(space.size()) < planned)
    space.resize(planned);
  counters.noteBuffer(name, requested);
  return std::nullopt;
}

Status ExpertParallel::dispatch(const DispatchInput &in,
                                const DispatchAllocator &allocate,
                                int64_t &rows, int64_t &handle) {
  Counters &counters = coll.counters();
  Timer timer{counters, "dispatch"};
  const int ranks = coll.size();
  Placement placement;
  if (Status e = localProblem(in, ranks, placement))
    return coll.failTogether("dispatch", *e);

  // The slot of each (token, choice): the n-th choice of an expert here
  // goes to the replica the placement picks for n.
  const int64_t perRank = placement.slotsPerRank();
  std::vector<int32_t> slotOf(in.tokens * in.topK);
  std::vector<int64_t> seen(placement.experts(), 0);
  for (int64_t i = 0; i < in.tokens * in.topK; ++i)
    slotOf[i] = placement.choose(in.expertIds[i], seen[in.expertIds[i]]++);

  // One row per (token, destination rank), grouped by destination.
  std::vector<std::vector<int32_t>> tokensFor(ranks);
  for (int64_t t = 0; t < in.tokens; ++t) {
    std::vector<bool> hit(ranks, false);
    for (int64_t j = 0; j < in.topK; ++j)
      hit[slotOf[t * in.topK + j] / perRank] = true;
    for (int d = 0; d < ranks; ++d)
      if (hit[d])
        tokensFor[d].push_back(int32_t(t));
  }

  InFlight state;
  state.live = true;
  state.tokens = in.tokens;
  state.hidden = in.hidden;
  state.elementBytes = in.elementBytes;
  state.slots = in.slots;
  state.sentRows.resize(ranks);
  state.receivedRows.assign(ranks, in.slots);
  for (int d = 0; d < ranks; ++d) {
    state.sentRows[d] = int64_t(tokensFor[d].size());
    state.sentToken.insert(state.sentToken.end(), tokensFor[d].begin(),
                           tokensFor[d].end());
  }

  if (!in.slots) {
    // Counts first: everyone learns how many rows it will receive.
    std::vector<int64_t> countBytes(ranks, sizeof(int64_t));
    if (Status e = coll.allToAllV("dispatch.counts", state.sentRows.data(),
                                  countBytes.data(), state.receivedRows.data(),
                                  countBytes.data()))
      return e;
    // Every rank learns every rank's load, so an overflow fails all of them
    // with the same message, before any payload is written.
    int64_t received = 0;
    for (int64_t r : state.receivedRows)
      received += r;
    std::vector<int64_t> loads(ranks, 0);
    loads[coll.rank()] = received;
    if (Status e = coll.allReduce("dispatch.capacity", loads.data(), ranks,
                                  ReduceOp::Sum))
      return e;
    for (int r = 0; r < ranks; ++r)
      if (loads[r] > in.capacity) {
        std::ostringstream os;
        os << "dispatch: rank " << r << " would receive " << loads[r]
           << " rows but the plan's capacity is " << in.capacity
           << " rows; nothing was written";
        return os.str();
      }
  }
  int64_t sendRows = 0, recvRows = 0;
  for (int p = 0; p < ranks; ++p) {
    sendRows += state.sendBlock(p);
    recvRows += state.recvBlock(p);
  }

  // Bytes of x in the output element type, and on the wire.
  const bool quantized = in.quant != QuantScheme::None;
  const int64_t xBytes = in.hidden * in.elementBytes;
  const int64_t wireXBytes = quantized ? quantRowBytes(in.quant, in.hidden) : xBytes;
  // Local expert ids travel as int16 (a rank holds at most 32767 experts).
  const int64_t routeBytes = in.topK * int64_t(sizeof(int16_t) + sizeof(float));
  const int64_t rowBytes = wireXBytes + routeBytes;
  // The plan, from the compiler or else from the maxima: each token reaches
  // at most min(ranks, top-k) ranks.
  const int64_t maxTokens = in.maxTokens ? in.maxTokens : in.tokens;
  const int64_t plannedSendRows =
      in.slots ? ranks * in.slots : maxTokens * std::min<int64_t>(ranks, in.topK);
  const int64_t plannedRecvRows = in.slots ? ranks * in.slots : in.capacity;
  auto planned = [](int64_t given, int64_t derived) { return given ? given : derived; };
  state.plannedCombineBytes = planned(in.combineBytes, plannedSendRows * xBytes);
  if (Status e = reserve(sendSpace, "dispatch.send",
                         planned(in.sendBytes, plannedSendRows * rowBytes),
                         sendRows * rowBytes))
    return coll.failTogether("dispatch.payload", *e);
  if (Status e = reserve(recvSpace, "dispatch.recv",
                         planned(in.recvBytes, plannedRecvRows * rowBytes),
                         recvRows * rowBytes))
    return coll.failTogether("dispatch.payload", *e);
  // What the experts get per row: activations, or codes and f32 scales.
  const bool keepCodes = quantized && in.keepCodes;
  const int64_t groups = quantized ? in.hidden / quantGroupSize(in.quant) : 0;
  const int64_t expertRowBytes = keepCodes ? in.hidden + groups * 4 : xBytes;
  const int64_t expertRowsBytes =
      planned(in.expertRowsBytes, plannedRecvRows * expertRowBytes);
  if (recvRows * expertRowBytes > expertRowsBytes)
    return coll.failTogether(
        "dispatch.payload",
        "workspace 'expert.rows': " + std::to_string(recvRows * expertRowBytes) +
            " bytes requested but the plan sized it for " +
            std::to_string(expertRowsBytes) + "; nothing was written");

  // A token going to several ranks is quantized once per destination; the
  // result is the same bytes each time. Masked rows are zero bytes: x = 0,
  // weights 0, ids -1 (written below).
  std::vector<float> values(quantized ? in.hidden : 0);
  std::vector<int16_t> ids(in.topK);
  std::vector<float> weights(in.topK);
  uint8_t *out = sendSpace.data();
  for (int d = 0; d < ranks; ++d) {
    for (int32_t t : tokensFor[d]) {
      const uint8_t *x = in.x + t * in.xRowStride * in.elementBytes;
      if (quantized) {
        for (int64_t h = 0; h < in.hidden; ++h)
          values[h] = loadElement(x + h * in.elementBytes, in.elementBytes);
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
    sendBytes[p] = state.sendBlock(p) * rowBytes;
    recvBytes[p] = state.recvBlock(p) * rowBytes;
  }
  if (Status e = coll.allToAllV("dispatch.payload", sendSpace.data(),
                                sendBytes.data(), recvSpace.data(),
                                recvBytes.data()))
    return e;

  DispatchOutput dest = allocate(recvRows);
  for (int64_t r = 0; r < recvRows; ++r) {
    const uint8_t *row = recvSpace.data() + r * rowBytes;
    if (keepCodes) {
      std::memcpy(dest.x + r * in.hidden, row, in.hidden);
      decodeScales(in.quant, row + in.hidden, in.hidden, dest.scales + r * groups);
    } else if (quantized) {
      dequantizeRow(in.quant, row, row + in.hidden, in.hidden, values.data());
      uint8_t *x = dest.x + r * xBytes;
      for (int64_t h = 0; h < in.hidden; ++h)
        storeElement(x + h * in.elementBytes, in.elementBytes, values[h]);
    } else {
      std::memcpy(dest.x + r * xBytes, row, xBytes);
    }
    std::memcpy(ids.data(), row + wireXBytes, in.topK * sizeof(int16_t));
    for (int64_t j = 0; j < in.topK; ++j)
      dest.localIds[r * in.topK + j] = ids[j];
    std::memcpy(dest.weights + r * in.topK,
                row + wireXBytes + in.topK * sizeof(int16_t), in.topK * sizeof(float));
  }
  counters.notePlan("expert.rows", expertRowsBytes);
  counters.noteBuffer("expert.rows", recvRows * expertRowBytes);
  // The load the experts here got: (token, choice) pairs, masked ones not.
  int64_t choices = 0;
  for (int64_t i = 0; i < recvRows * in.topK; ++i)
    choices += dest.localIds[i] >= 0;
  counters.totals["expert_choices_received"] += choices;
  counters.totals["dispatch_rows_sent"] += int64_t(state.sentToken.size());
  counters.totals["dispatch_payload_bytes_sent"] += sendRows * rowBytes;
  counters.totals["dispatch_bytes_per_token_expert_pair"] +=
      in.tokens * in.topK * (wireXBytes + int64_t(sizeof(int16_t) + sizeof(float)));
  // The scheme of the latest dispatch (QuantScheme's value; 0 = none), and
  // what its rows would have cost in the element type.
  counters.totals["dispatch_quantization"] = int64_t(in.quant);
  counters.totals["dispatch_payload_bytes_unquantized"] +=
      sendRows * (xBytes + routeBytes);
  counters.totals[in.slots ? "dispatch_calls_decode" : "dispatch_calls_prefill"] += 1;

  rows = recvRows;
  for (handle = 0; handle < int64_t(inFlight.size()); ++handle)
    if (!inFlight[handle].live)
      break;
  if (handle == int64_t(inFlight.size()))
    inFlight.emplace_back();
  inFlight[handle] = std::move(state);
  return std::nullopt;
}

int64_t ExpertParallel::tokensOf(int64_t handle) const {
  if (handle < 0 || handle >= int64_t(inFlight.size()) || !inFlight[handle].live)
    return -1;
  return inFlight[handle].tokens;
}

Status ExpertParallel::combine(int64_t handle, const uint8_t *partial,
                               int64_t rows, uint8_t *y, int64_t &tokens) {
  Counters &counters = coll.counters();
  Timer timer{counters, "combine"};
  if (tokensOf(handle) < 0)
    return "combine: handle " + std::to_string(handle) +
           " does not name a dispatch in flight";
  InFlight state = std::move(inFlight[handle]);
  inFlight[handle].live = false;
  const int ranks = coll.size();
  int64_t expectedRows = 0, backRows = 0;
  for (int p = 0; p < ranks; ++p) {
    expectedRows += state.recvBlock(p);
    backRows += state.sendBlock(p);
  }
  if (rows != expectedRows)
    return "combine: got " + std::to_string(rows) + " rows but dispatch delivered " +
           std::to_string(expectedRows);

  const int64_t xBytes = state.hidden * state.elementBytes;
  if (Status e = reserve(combineSpace, "combine.recv", state.plannedCombineBytes,
                         backRows * xBytes))
    return coll.failTogether("combine.payload", *e);
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
  std::vector<float> sum(state.tokens * state.hidden, 0.0f);
  const uint8_t *block = combineSpace.data();
  const int32_t *token = state.sentToken.data();
  for (int p = 0; p < ranks; ++p) {
    for (int64_t r = 0; r < state.sentRows[p]; ++r, ++token) {
      float *acc = sum.data() + *token * state.hidden;
      const uint8_t *row = block + r * xBytes;
      for (int64_t h = 0; h < state.hidden; ++h)
        acc[h] += loadElement(row + h * state.elementBytes, state.elementBytes);
    }
    block += state.sendBlock(p) * xBytes;
  }
  for (int64_t i = 0; i < state.tokens * state.hidden; ++i)
    storeElement(y + i * state.elementBytes, state.elementBytes, sum[i]);
  tokens = state.tokens;
  return std::nullopt;
}
