//===- nccl_check.cpp - the nccl backend across MPI ranks, on a fake GPU ---===//
//
// Run under mpirun with $MOERT_CUDA_LIBRARY naming the fake libmoert_cuda
// (FakeNccl.cpp: the real NCCL communicator over a fake cudart and NCCL
// whose device memory only copies may touch), so that the nccl backend's
// code runs without a GPU. Scenarios:
//
// - all-gather: the all-gather exchange (moert_ep_gather_into_* and
//   moert_ep_return_into_*) on device buffers, bf16 rows of odd width and
//   f32 rows, twice each; every rank checks every block it received against
//   the formula that made it on its rank, and the counters against the
//   blocks' sizes; FP8 codes and scales (moert_ep_gather_fp8_into_bf16) the
//   same way; the exchange packed by the layer (moert_ep_send_packed_into_*
//   and moert_ep_return_packed_into_*) with blocks of 0-2 rows a rank, and
//   its replicas chosen per batch (moert_ep_select_slots_into); then
//   the host collectives (moert_allreduce_i64,
//   moert_agree_max, moert_allgather, moert_barrier on host values); with
//   $FAKE_CUDA_CAPTURING=1 (every stream being captured into a CUDA graph)
//   only the exchanges that read nothing on the host;
// - per-batch: the all-gather exchange with replicas chosen per batch,
//   which must be refused on every rank while the stream is captured;
// - host-buffers: every rank must fail, naming why (the all-gather
//   exchange on the nccl backend takes device buffers);
// - bad-ids: the last rank gives an id of no expert to the all-gather
//   exchange, and must fail naming it (by the watchdog's check once the
//   stream passed the ids; with $MOERT_NCCL_HOST_WAIT=1 before any byte
//   moves, and every rank with it).
//
// The packed exchange on the nccl backend: ep_check.cpp --backend nccl.
//
// With $FAKE_NCCL_STALL=R or $FAKE_NCCL_FAIL=R the all-gather scenario
// must fail on every rank within the timeout (expect_every_rank.cmake).
//
//===----------------------------------------------------------------------===//
#include "FakeDevice.h"
#include "moert/moert.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {
constexpr int64_t kSlots = 4, kHidden = 5, kTopK = 2, kExpertsPerRank = 3;
void *const kStream = reinterpret_cast<void *>(0x7);

moert_memref2d memref2(void *p, int64_t rows, int64_t cols) {
  return moert_memref2d{p, p, 0, {rows, cols}, {cols, 1}};
}
moert_memref1d memref1(void *p, int64_t n) { return moert_memref1d{p, p, 0, {n}, {1}}; }

int failures = 0;
void check(bool ok, const std::string &what) {
  if (!ok && failures++ < 10)
    std::fprintf(stderr, "nccl_check: rank %d: FAIL: %s\n", moert_rank(), what.c_str());
}

/// The fake library's device memory (the same library the runtime opened).
struct FakeDevice : moert::test::FakeDevice {
  FakeDevice() : moert::test::FakeDevice(std::getenv("MOERT_CUDA_LIBRARY")) {}
  void (*expectStream)(void *) = get<void (*)(void *)>("fake_device_expect_stream");
  int (*pending)() = get<int (*)()>("fake_device_pending");
  int (*waits)() = get<int (*)()>("fake_device_waits");
  template <typename T> T *produce(const std::vector<T> &host) const {
    return moert::test::FakeDevice::produce(host, kStream);
  }
};

/// An exchange on the layer's stream returns once its collectives are
/// enqueued (their timeout is the watchdog's), or, with
/// $MOERT_NCCL_HOST_WAIT=1, once they are done.
bool hostWaits() {
  const char *env = std::getenv("MOERT_NCCL_HOST_WAIT");
  return env && std::string(env) == "1";
}
void checkReturn(const FakeDevice &dev, const std::string &what) {
  const bool hostWait = hostWaits();
  const int pending = dev.pending();
  check(hostWait ? pending == 0 : pending > 0,
        what + (hostWait ? ": returned with " + std::to_string(pending) +
                               " items of the stream's work not run"
                         : ": the host waited for the stream's collectives"));
}

int64_t tokensOn(int rank) { return 1 + rank % kSlots; }
/// Row values every rank can compute: exact in bf16 (small integers / 8).
float value(int rank, int64_t row, int64_t col, int round) {
  return float((rank * 7 + row * 3 + col + round) % 23) / 8.0f;
}
uint16_t bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return uint16_t(bits >> 16); // exact for these values
}
int32_t expertOf(int rank, int64_t t, int64_t j, int ranks) {
  return int32_t((rank + 2 * t + 5 * j) % (kExpertsPerRank * ranks));
}
/// The bad-ids scenario: the last rank's first token's second choice is no
/// expert (one past the last).
bool badIds = false;
int32_t idOf(int rank, int64_t t, int64_t j, int ranks) {
  if (badIds && rank == ranks - 1 && t == 0 && j == 1)
    return int32_t(kExpertsPerRank * ranks);
  return expertOf(rank, t, j, ranks);
}

/// `f` as a row element: bf16 (uint16_t) or f32.
template <typename T> T element(float f) {
  if constexpr (sizeof(T) == 2)
    return bf16(f);
  else
    return f;
}

/// Rows of `rank` (t < tokens) or of its block (r < slots) as elements.
template <typename T>
std::vector<T> rowsOf(int rank, int64_t count, int round, int64_t hidden = kHidden) {
  std::vector<T> rows(size_t(count * hidden));
  for (int64_t r = 0; r < count; ++r)
    for (int64_t c = 0; c < hidden; ++c)
      rows[size_t(r * hidden + c)] = element<T>(value(rank, r, c, round));
  return rows;
}

/// The partial rows rank `computedBy` returns in a combine, row `row` of
/// its buffer.
float partialValue(int computedBy, int64_t row, int64_t col, int round) {
  return value(computedBy + 11, row, col, round);
}

/// The combine's exchange after a gather: block r of the partial rows goes
/// back to rank r; rank r receives from rank p the rows p computed for r's
/// block.
template <typename T>
void returnAndCheck(FakeDevice &dev, int64_t handle, int64_t hidden, int round,
                    const std::string &tag) {
  const int rank = moert_rank(), ranks = moert_size();
  const int64_t rows = ranks * kSlots;
  const bool bf = sizeof(T) == 2;
  std::vector<T> partial = rowsOf<T>(rank + 11, rows, round, hidden);
  std::vector<T> returned(size_t(rows * hidden), T(3));
  T *dreturned = dev.upload(returned); // (the test's copies run the stream's work)
  T *dpartial = dev.produce(partial);
  auto partm = memref2(dpartial, rows, hidden), retm = memref2(dreturned, rows, hidden);
  if (bf)
    _mlir_ciface_moert_ep_return_into_bf16(&partm, handle, &retm, kStream);
  else
    _mlir_ciface_moert_ep_return_into_f32(&partm, handle, &retm, kStream);
  checkReturn(dev, tag + ": combine");
  returned = dev.download(dreturned, returned.size());
  for (int from = 0; from < ranks; ++from)
    for (int64_t s = 0; s < kSlots; ++s)
      for (int64_t c = 0; c < hidden; ++c) {
        const int64_t row = from * kSlots + s;
        const T want = element<T>(partialValue(from, rank * kSlots + s, c, round));
        check(returned[size_t(row * hidden + c)] == want,
              tag + ": returned row " + std::to_string(row) + " col " + std::to_string(c));
      }
}

template <typename T> void allGatherRound(FakeDevice &dev, int round) {
  const bool bf = sizeof(T) == 2;
  const int rank = moert_rank(), ranks = moert_size();
  const int64_t tokens = tokensOn(rank), rows = ranks * kSlots, experts = kExpertsPerRank * ranks;
  std::vector<T> x = rowsOf<T>(rank, tokens, round);
  std::vector<int32_t> ids(size_t(tokens * kTopK)), expertRank(static_cast<size_t>(experts));
  std::vector<float> weights(size_t(tokens * kTopK));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < kTopK; ++j) {
      ids[size_t(t * kTopK + j)] = idOf(rank, t, j, ranks);
      weights[size_t(t * kTopK + j)] = 0.5f + float(t + j) / 4.0f;
    }
  for (int64_t e = 0; e < experts; ++e)
    expertRank[size_t(e)] = int32_t(e / kExpertsPerRank);
  std::vector<int64_t> plan = {rows, kSlots, kSlots, 0, ranks, 0, 0, 0, 0, experts};

  T *dx = dev.produce(x);
  int32_t *dids = dev.produce(ids), *drank = dev.produce(expertRank);
  float *dweights = dev.produce(weights);
  T *dreceived = dev.upload(std::vector<T>(size_t(rows * kHidden), T(1)));
  int32_t *dgids = dev.upload(std::vector<int32_t>(size_t(rows * kTopK), 7));
  float *dgweights = dev.upload(std::vector<float>(size_t(rows * kTopK), 7.0f));
  auto xm = memref2(dx, tokens, kHidden), im = memref2(dids, tokens, kTopK);
  auto wm = memref2(dweights, tokens, kTopK);
  auto rm = memref1(drank, experts), pm = memref1(plan.data(), int64_t(plan.size()));
  auto rxm = memref2(dreceived, rows, kHidden), gim = memref2(dgids, rows, kTopK);
  auto gwm = memref2(dgweights, rows, kTopK);
  moert_counters_reset();
  const int waitsBefore = dev.waits();
  const int64_t handle = bf ? _mlir_ciface_moert_ep_gather_into_bf16(&xm, &im, &wm, &rm, &pm, &rxm,
                                                                     &gim, &gwm, kStream)
                            : _mlir_ciface_moert_ep_gather_into_f32(&xm, &im, &wm, &rm, &pm, &rxm,
                                                                    &gim, &gwm, kStream);
  const std::string tag = std::string(bf ? "bf16" : "f32") + " round " + std::to_string(round);
  checkReturn(dev, tag + ": dispatch");
  // The ids and the map are checked where the stream passes them, by the
  // watchdog; with $MOERT_NCCL_HOST_WAIT=1 the host waits to read them.
  check(dev.waits() - waitsBefore == (hostWaits() ? 1 : 0),
        tag + ": the dispatch waited " + std::to_string(dev.waits() - waitsBefore) +
            " times for the stream");
  std::vector<T> received = dev.download(dreceived, size_t(rows * kHidden));
  std::vector<int32_t> gids = dev.download(dgids, size_t(rows * kTopK));
  std::vector<float> gweights = dev.download(dgweights, size_t(rows * kTopK));
  for (int from = 0; from < ranks; ++from) {
    const int64_t n = tokensOn(from);
    std::vector<T> theirs = rowsOf<T>(from, n, round);
    for (int64_t s = 0; s < kSlots; ++s) {
      const int64_t row = from * kSlots + s;
      for (int64_t c = 0; c < kHidden; ++c)
        check(received[size_t(row * kHidden + c)] ==
                  (s < n ? theirs[size_t(s * kHidden + c)] : T(0)),
              tag + ": received row " + std::to_string(row) + " col " + std::to_string(c));
      for (int64_t j = 0; j < kTopK; ++j) {
        const size_t i = size_t(row * kTopK + j);
        check(gids[i] == (s < n ? idOf(from, s, j, ranks) : -1),
              tag + ": gathered_ids[" + std::to_string(row) + "," + std::to_string(j) + "]");
        check(gweights[i] == (s < n ? 0.5f + float(s + j) / 4.0f : 0.0f),
              tag + ": gathered_weights[" + std::to_string(row) + "," + std::to_string(j) + "]");
      }
    }
  }

  returnAndCheck<T>(dev, handle, kHidden, round, tag);

  // Every rank's block of kSlots rows, whatever its tokens.
  std::vector<char> json(8192);
  moert_counters_json(json.data(), int64_t(json.size()));
  const std::string counters(json.data());
  const int64_t payload = ranks * kSlots * kHidden * int64_t(sizeof(T));
  check(counters.find("\"dispatch.payload\"") != std::string::npos &&
            counters.find(std::to_string(payload)) != std::string::npos,
        tag + ": counters lack dispatch.payload with " + std::to_string(payload) +
            " bytes: " + counters);
}
/// Rows rank `from` sends rank `to` in a packed round (0, 1 or 2).
int64_t packedCount(int from, int to) { return (from + 2 * to) % 3; }

/// The exchange packed by the layer (moert_ep_send_packed_into_* and
/// moert_ep_return_packed_into_*) on device buffers: rank r's rows grouped
/// by destination (some blocks empty, two unsent rows at the end), each
/// with its route row; every rank checks the blocks it received in rank
/// order, the route rows past them (all ones), the rows past them (not
/// written), and the rows returned into its send order.
template <typename T> void packedRound(FakeDevice &dev, int round) {
  const bool bf = sizeof(T) == 2;
  const int rank = moert_rank(), ranks = moert_size();
  const int64_t experts = kExpertsPerRank * ranks, width = 2 * kTopK, capacity = 2 * ranks;
  std::vector<int32_t> offsets(size_t(ranks + 1), 0);
  for (int p = 0; p < ranks; ++p)
    offsets[size_t(p + 1)] = offsets[size_t(p)] + int32_t(packedCount(rank, p));
  const int64_t sent = offsets[size_t(ranks)], rows = sent + 2;
  // Every rank computes every rank's offsets: the rows and route rows are
  // formulas of (sender, its row).
  auto offsetsOf = [&](int from) {
    std::vector<int64_t> at(size_t(ranks + 1), 0);
    for (int p = 0; p < ranks; ++p)
      at[size_t(p + 1)] = at[size_t(p)] + packedCount(from, p);
    return at;
  };
  auto targetOf = [&](int from, int64_t row) {
    std::vector<int64_t> at = offsetsOf(from);
    int to = 0;
    while (to + 1 < ranks && row >= at[size_t(to + 1)])
      ++to;
    return int32_t(to * kExpertsPerRank + (from + row) % kExpertsPerRank);
  };
  auto routeOf = [&](int from, int64_t row, int64_t j) {
    if (j < kTopK) {
      const int32_t target = j == 0 ? targetOf(from, row) : -1;
      float bits;
      std::memcpy(&bits, &target, 4);
      return bits;
    }
    return 0.25f * float(from + row + j);
  };
  std::vector<T> x = rowsOf<T>(rank, rows, round);
  std::vector<float> route(size_t(rows * width));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j)
      route[size_t(r * width + j)] = routeOf(rank, r, j);
  std::vector<int32_t> expertRank(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e)
    expertRank[size_t(e)] = int32_t(e / kExpertsPerRank);
  std::vector<int64_t> plan = {capacity, 0, 0, 0, ranks, 0, 0, 0, 0, experts};

  T *dx = dev.produce(x);
  float *droute = dev.produce(route);
  int32_t *doffsets = dev.produce(offsets), *drank = dev.produce(expertRank);
  T *dreceived = dev.upload(std::vector<T>(size_t(capacity * kHidden), T(1)));
  float *drroute = dev.upload(std::vector<float>(size_t(capacity * width), 7.0f));
  auto xm = memref2(dx, rows, kHidden), rtm = memref2(droute, rows, width);
  auto om = memref1(doffsets, ranks + 1), rm = memref1(drank, experts);
  auto pm = memref1(plan.data(), int64_t(plan.size()));
  auto rxm = memref2(dreceived, capacity, kHidden), rrm = memref2(drroute, capacity, width);
  moert_counters_reset();
  const int64_t handle = bf ? _mlir_ciface_moert_ep_send_packed_into_bf16(&xm, &rtm, &om, &rm, &pm,
                                                                          &rxm, &rrm, kStream)
                            : _mlir_ciface_moert_ep_send_packed_into_f32(&xm, &rtm, &om, &rm, &pm,
                                                                         &rxm, &rrm, kStream);
  const std::string tag =
      std::string("packed ") + (bf ? "bf16" : "f32") + " round " + std::to_string(round);
  std::vector<T> received = dev.download(dreceived, size_t(capacity * kHidden));
  std::vector<float> rroute = dev.download(drroute, size_t(capacity * width));
  int64_t at = 0;
  std::vector<int64_t> startOn(static_cast<size_t>(ranks)); // where my rows start on each rank
  for (int to = 0; to < ranks; ++to) {
    int64_t before = 0;
    for (int from = 0; from < rank; ++from)
      before += packedCount(from, to);
    startOn[size_t(to)] = before;
  }
  for (int from = 0; from < ranks; ++from) {
    const int64_t first = offsetsOf(from)[size_t(rank)];
    std::vector<T> theirs = rowsOf<T>(from, first + packedCount(from, rank), round);
    for (int64_t i = 0; i < packedCount(from, rank); ++i, ++at) {
      for (int64_t c = 0; c < kHidden; ++c)
        check(received[size_t(at * kHidden + c)] == theirs[size_t((first + i) * kHidden + c)],
              tag + ": received row " + std::to_string(at) + " col " + std::to_string(c));
      for (int64_t j = 0; j < width; ++j) {
        const float want = routeOf(from, first + i, j);
        check(std::memcmp(&rroute[size_t(at * width + j)], &want, 4) == 0,
              tag + ": received route " + std::to_string(at) + "," + std::to_string(j));
      }
    }
  }
  for (int64_t r = at; r < capacity; ++r) {
    for (int64_t c = 0; c < kHidden; ++c)
      check(received[size_t(r * kHidden + c)] == T(1),
            tag + ": row " + std::to_string(r) + " past the received ones was written");
    for (int64_t j = 0; j < width; ++j) {
      uint32_t bits;
      std::memcpy(&bits, &rroute[size_t(r * width + j)], 4);
      check(bits == 0xffffffffu, tag + ": route row " + std::to_string(r) + " not masked");
    }
  }

  // The return: rank p computed partial row q for the q-th row it received.
  std::vector<T> partial = rowsOf<T>(rank + 11, capacity, round);
  std::vector<T> returned(size_t(rows * kHidden), T(3));
  T *dreturned = dev.upload(returned);
  T *dpartial = dev.produce(partial);
  auto partm = memref2(dpartial, capacity, kHidden), retm = memref2(dreturned, rows, kHidden);
  if (bf)
    _mlir_ciface_moert_ep_return_packed_into_bf16(&partm, handle, &retm, kStream);
  else
    _mlir_ciface_moert_ep_return_packed_into_f32(&partm, handle, &retm, kStream);
  returned = dev.download(dreturned, returned.size());
  for (int to = 0; to < ranks; ++to)
    for (int64_t i = 0; i < packedCount(rank, to); ++i)
      for (int64_t c = 0; c < kHidden; ++c) {
        const int64_t row = offsets[size_t(to)] + i;
        const T want = element<T>(partialValue(to, startOn[size_t(to)] + i, c, round));
        check(returned[size_t(row * kHidden + c)] == want,
              tag + ": returned row " + std::to_string(row) + " col " + std::to_string(c));
      }
  for (int64_t row = sent; row < rows; ++row)
    check(returned[size_t(row * kHidden)] == T(3),
          tag + ": unsent row " + std::to_string(row) + " was written by the return");
  std::vector<char> json(8192);
  moert_counters_json(json.data(), int64_t(json.size()));
  const std::string counters(json.data());
  check(counters.find("\"dispatch.route\"") != std::string::npos &&
            counters.find("\"dispatch.counts\"") != std::string::npos,
        tag + ": counters lack dispatch.counts or dispatch.route: " + counters);
}

/// The per-batch rounds' placement: rank r's slots hold experts 3r..3r+2
/// and a replica of expert 0.
std::vector<int32_t> replicatedPlacement(int ranks) {
  const int64_t perRank = kExpertsPerRank + 1, slotCount = perRank * ranks;
  std::vector<int32_t> physToLog(static_cast<size_t>(slotCount));
  for (int64_t p = 0; p < slotCount; ++p)
    physToLog[size_t(p)] =
        p % perRank < kExpertsPerRank ? int32_t(p / perRank * kExpertsPerRank + p % perRank) : 0;
  return physToLog;
}
/// Choice j of token t on rank `from` in the per-batch rounds: expert 0
/// first, then another.
int32_t perBatchExpert(int from, int64_t t, int64_t j, int64_t experts) {
  return j == 0 ? 0 : int32_t(1 + (from + 2 * t) % (experts - 1));
}
/// The busiest rank's choices (`load`) against the least peak any split of
/// expert 0's `replicated` choices gives, with `fixed` choices per rank.
void checkLeastPeak(const std::vector<int64_t> &load, const std::vector<int64_t> &fixed,
                    int64_t replicated, const std::string &tag) {
  const int64_t ranks = int64_t(load.size());
  int64_t total = replicated, peak = 0, most = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    total += fixed[size_t(r)];
    peak = std::max(peak, fixed[size_t(r)]);
    most = std::max(most, load[size_t(r)]);
  }
  peak = std::max(peak, (total + ranks - 1) / ranks);
  check(most == peak, tag + ": the busiest rank has " + std::to_string(most) +
                          " choices, the least peak is " + std::to_string(peak));
}

/// Replicas chosen per batch (plan field replica_selection = 1) with a
/// placement: rank r's slots hold experts 3r..3r+2 and a replica of expert
/// 0, which every token chooses first. The gathered ids are slots, each of
/// its choice's expert, and the busiest rank gets no more choices than any
/// split can give it: expert 0 fills the ranks up like water.
void perBatchGatherRound(FakeDevice &dev) {
  const int rank = moert_rank(), ranks = moert_size();
  const int64_t perRank = kExpertsPerRank + 1, slotCount = perRank * ranks;
  const int64_t experts = kExpertsPerRank * ranks, rows = ranks * kSlots;
  const std::vector<int32_t> physToLog = replicatedPlacement(ranks);
  std::vector<float> share(static_cast<size_t>(slotCount), 1.0f); // not read
  auto expertAt = [&](int from, int64_t t, int64_t j) {
    return perBatchExpert(from, t, j, experts);
  };
  const int64_t tokens = tokensOn(rank);
  std::vector<float> x(size_t(tokens * kHidden), 1.0f), weights(size_t(tokens * kTopK), 0.5f);
  std::vector<int32_t> ids(size_t(tokens * kTopK));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < kTopK; ++j)
      ids[size_t(t * kTopK + j)] = expertAt(rank, t, j);
  std::vector<int64_t> plan = {rows, kSlots, kSlots, 0, ranks, 0, 0, 0, 0, 0, 1};
  float *dx = dev.produce(x), *dweights = dev.produce(weights);
  int32_t *dids = dev.produce(ids), *dmap = dev.produce(physToLog);
  float *dshare = dev.produce(share);
  float *dreceived = dev.upload(std::vector<float>(size_t(rows * kHidden), 1.0f));
  int32_t *dgids = dev.upload(std::vector<int32_t>(size_t(rows * kTopK), 7));
  float *dgweights = dev.upload(std::vector<float>(size_t(rows * kTopK), 7.0f));
  auto xm = memref2(dx, tokens, kHidden), im = memref2(dids, tokens, kTopK);
  auto wm = memref2(dweights, tokens, kTopK);
  auto mm = memref1(dmap, slotCount), sm = memref1(dshare, slotCount);
  auto pm = memref1(plan.data(), int64_t(plan.size()));
  auto rxm = memref2(dreceived, rows, kHidden), gim = memref2(dgids, rows, kTopK);
  auto gwm = memref2(dgweights, rows, kTopK);
  const int64_t handle = _mlir_ciface_moert_ep_gather_placed_into_f32(&xm, &im, &wm, &mm, &sm, &pm,
                                                                      &rxm, &gim, &gwm, kStream);
  std::vector<int32_t> gids = dev.download(dgids, size_t(rows * kTopK));
  std::vector<int64_t> load(size_t(ranks), 0), fixed(size_t(ranks), 0);
  int64_t replicated = 0;
  for (int from = 0; from < ranks; ++from)
    for (int64_t s = 0; s < kSlots; ++s)
      for (int64_t j = 0; j < kTopK; ++j) {
        const int32_t slot = gids[size_t((from * kSlots + s) * kTopK + j)];
        const std::string where = "per batch: gathered_ids[" + std::to_string(from * kSlots + s) +
                                  "," + std::to_string(j) + "] = " + std::to_string(slot);
        if (s >= tokensOn(from)) {
          check(slot == -1, where + " (a masked row)");
          continue;
        }
        const int32_t expert = expertAt(from, s, j);
        check(slot >= 0 && slot < slotCount && physToLog[size_t(slot)] == expert,
              where + ", not a slot of expert " + std::to_string(expert));
        if (slot >= 0 && slot < slotCount)
          ++load[size_t(slot / perRank)];
        if (expert == 0)
          ++replicated;
        else
          ++fixed[size_t(expert / kExpertsPerRank)];
      }
  checkLeastPeak(load, fixed, replicated, "per batch");
  returnAndCheck<float>(dev, handle, kHidden, 0, "per batch");
}

/// Replicas chosen per batch for the layer's packing
/// (moert_ep_select_slots_into) on device buffers: every slot names its
/// choice's expert, and over all ranks the busiest rank is at the least
/// peak.
void selectSlotsRound(FakeDevice &dev) {
  const int rank = moert_rank(), ranks = moert_size();
  const int64_t perRank = kExpertsPerRank + 1, slotCount = perRank * ranks;
  const int64_t experts = kExpertsPerRank * ranks, tokens = tokensOn(rank);
  const std::vector<int32_t> physToLog = replicatedPlacement(ranks);
  std::vector<int32_t> ids(size_t(tokens * kTopK));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < kTopK; ++j)
      ids[size_t(t * kTopK + j)] = perBatchExpert(rank, t, j, experts);
  std::vector<int64_t> plan = {ranks * kSlots, 0, 0, 0, ranks, 0, 0, 0, 0, 0, 1};
  int32_t *dids = dev.produce(ids), *dmap = dev.produce(physToLog);
  int32_t *dslots = dev.upload(std::vector<int32_t>(size_t(tokens * kTopK), 7));
  auto im = memref2(dids, tokens, kTopK), slm = memref2(dslots, tokens, kTopK);
  auto mm = memref1(dmap, slotCount), pm = memref1(plan.data(), int64_t(plan.size()));
  _mlir_ciface_moert_ep_select_slots_into(&im, &mm, &pm, &slm, kStream);
  std::vector<int32_t> slots = dev.download(dslots, size_t(tokens * kTopK));
  // Per rank: its load, its fixed choices; then expert 0's choices; summed over the ranks.
  std::vector<int64_t> counts(size_t(2 * ranks + 1), 0);
  for (int64_t i = 0; i < tokens * kTopK; ++i) {
    const int32_t slot = slots[size_t(i)], expert = ids[size_t(i)];
    check(slot >= 0 && slot < slotCount && physToLog[size_t(slot)] == expert,
          "select slots: slots[" + std::to_string(i) + "] = " + std::to_string(slot) +
              ", not a slot of expert " + std::to_string(expert));
    if (slot >= 0 && slot < slotCount)
      ++counts[size_t(slot / perRank)];
    ++counts[expert == 0 ? size_t(2 * ranks) : size_t(ranks + expert / kExpertsPerRank)];
  }
  check(moert_allreduce_i64("check.select_slots", counts.data(), int64_t(counts.size()), 0) == 0,
        "select slots: the counts' all-reduce");
  checkLeastPeak(std::vector<int64_t>(counts.begin(), counts.begin() + ranks),
                 std::vector<int64_t>(counts.begin() + ranks, counts.begin() + 2 * ranks),
                 counts[size_t(2 * ranks)], "select slots");
}

/// The FP8 form (moert_ep_gather_fp8_into_bf16): E4M3 bytes and their
/// scales (f32 per 128, or UE8M0 bytes per 32: 3 per row at H = 96, so the
/// masked rows' fill starts off 4-byte alignment) land in every rank's
/// block, masked rows 0; the combine then returns bf16 rows.
void fp8GatherRound(FakeDevice &dev, int scheme, int round) {
  const int rank = moert_rank(), ranks = moert_size();
  const int64_t hidden = scheme == 1 ? 256 : 96, groups = scheme == 1 ? 2 : 3;
  const int64_t scaleBytes = scheme == 1 ? 4 : 1, rowScaleBytes = groups * scaleBytes;
  const int64_t tokens = tokensOn(rank), rows = ranks * kSlots, experts = kExpertsPerRank * ranks;
  auto code = [&](int r, int64_t row, int64_t c) {
    return uint8_t((r * 7 + row * 3 + c + round) % 251 + 1);
  };
  auto scaleByte = [&](int r, int64_t row, int64_t b) { return uint8_t(r * 5 + row + b + 1); };
  std::vector<uint8_t> codes(size_t(tokens * hidden)), scales(size_t(tokens * rowScaleBytes));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < hidden; ++c)
      codes[size_t(t * hidden + c)] = code(rank, t, c);
    for (int64_t b = 0; b < rowScaleBytes; ++b)
      scales[size_t(t * rowScaleBytes + b)] = scaleByte(rank, t, b);
  }
  std::vector<int32_t> ids(size_t(tokens * kTopK)), expertRank(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < kTopK; ++j)
      ids[size_t(t * kTopK + j)] = expertOf(rank, t, j, ranks);
  for (int64_t e = 0; e < experts; ++e)
    expertRank[size_t(e)] = int32_t(e / kExpertsPerRank);
  std::vector<float> weights(size_t(tokens * kTopK), 0.25f);
  std::vector<int64_t> plan = {rows, kSlots, kSlots, scheme, ranks, 0, 0, 0, 0, experts};
  uint8_t *dcodes = dev.produce(codes), *dscales = dev.produce(scales);
  int32_t *dids = dev.produce(ids), *drank = dev.produce(expertRank);
  float *dweights = dev.produce(weights);
  uint8_t *dreceived = dev.upload(std::vector<uint8_t>(size_t(rows * hidden), 9));
  uint8_t *dreceivedScales = dev.upload(std::vector<uint8_t>(size_t(rows * rowScaleBytes), 9));
  int32_t *dgids = dev.upload(std::vector<int32_t>(size_t(rows * kTopK), 7));
  float *dgweights = dev.upload(std::vector<float>(size_t(rows * kTopK), 7.0f));
  auto cm = memref2(dcodes, tokens, hidden), sm = memref2(dscales, tokens, groups);
  auto im = memref2(dids, tokens, kTopK), wm = memref2(dweights, tokens, kTopK);
  auto rm = memref1(drank, experts), pm = memref1(plan.data(), int64_t(plan.size()));
  auto rcm = memref2(dreceived, rows, hidden), rsm = memref2(dreceivedScales, rows, groups);
  auto gim = memref2(dgids, rows, kTopK), gwm = memref2(dgweights, rows, kTopK);
  moert_counters_reset();
  const int64_t handle = _mlir_ciface_moert_ep_gather_fp8_into_bf16(
      &cm, &sm, &im, &wm, &rm, &pm, &rcm, &rsm, &gim, &gwm, kStream);
  const std::string tag =
      "fp8 scheme " + std::to_string(scheme) + " round " + std::to_string(round);
  std::vector<uint8_t> received = dev.download(dreceived, size_t(rows * hidden));
  std::vector<uint8_t> receivedScales = dev.download(dreceivedScales, size_t(rows * rowScaleBytes));
  std::vector<int32_t> gids = dev.download(dgids, size_t(rows * kTopK));
  for (int from = 0; from < ranks; ++from)
    for (int64_t s = 0; s < kSlots; ++s) {
      const int64_t row = from * kSlots + s;
      const bool valid = s < tokensOn(from);
      for (int64_t c = 0; c < hidden; ++c)
        check(received[size_t(row * hidden + c)] == (valid ? code(from, s, c) : 0),
              tag + ": received code row " + std::to_string(row) + " col " + std::to_string(c));
      for (int64_t b = 0; b < rowScaleBytes; ++b)
        check(receivedScales[size_t(row * rowScaleBytes + b)] ==
                  (valid ? scaleByte(from, s, b) : 0),
              tag + ": received scale row " + std::to_string(row) + " byte " + std::to_string(b));
      for (int64_t j = 0; j < kTopK; ++j)
        check(gids[size_t(row * kTopK + j)] == (valid ? expertOf(from, s, j, ranks) : -1),
              tag + ": gathered_ids[" + std::to_string(row) + "," + std::to_string(j) + "]");
    }
  std::vector<char> json(8192);
  moert_counters_json(json.data(), int64_t(json.size()));
  check(std::string(json.data()).find("\"dispatch.scales\"") != std::string::npos,
        tag + ": counters lack dispatch.scales");
  returnAndCheck<uint16_t>(dev, handle, hidden, round, tag);
}
/// The host collectives (values in host memory) on the nccl backend.
void hostCollectives() {
  const int rank = moert_rank(), ranks = moert_size();
  std::vector<int64_t> sums = {rank + 1, 10 * rank, -rank}, maxes = {rank, ranks - rank};
  check(moert_allreduce_i64("check.sum", sums.data(), 3, 0) == 0 &&
            sums == std::vector<int64_t>{ranks * (ranks + 1) / 2, 5 * ranks * (ranks - 1),
                                         -ranks * (ranks - 1) / 2},
        "moert_allreduce_i64 sum");
  check(moert_allreduce_i64("check.max", maxes.data(), 2, 1) == 0 &&
            maxes == std::vector<int64_t>{ranks - 1, ranks},
        "moert_allreduce_i64 max");
  check(moert_agree_max(3 * rank, MOERT_AGREE_PHASE_TOKENS) == 3 * (ranks - 1), "moert_agree_max");
  std::vector<int32_t> mine = {rank, 100 + rank}, all(size_t(2 * ranks), -1);
  const int gathered = moert_allgather("check.gather", mine.data(), 8, all.data());
  check(gathered == 0, std::string("moert_allgather: ") + moert_last_error());
  for (int r = 0; r < ranks; ++r)
    check(all[size_t(2 * r)] == r && all[size_t(2 * r + 1)] == 100 + r, "moert_allgather values");
  check(moert_barrier("check.barrier") == 0, "moert_barrier");
}
} // namespace

int main(int argc, char **argv) {
  const std::string scenario = argc > 1 ? argv[1] : "all-gather";
  if (moert_init("nccl", 0) != 0) {
    std::fprintf(stderr, "moert_init: %s\n", moert_last_error());
    return 1;
  }
  FakeDevice dev;
  if (!dev.loaded() || !dev.expectStream) {
    std::fprintf(stderr, "nccl_check: $MOERT_CUDA_LIBRARY is not the fake libmoert_cuda\n");
    return 1;
  }
  dev.expectStream(kStream);
  if (scenario == "all-gather") {
    for (int round = 0; round < 2; ++round) {
      allGatherRound<uint16_t>(dev, round);
      allGatherRound<float>(dev, round);
      fp8GatherRound(dev, 1, round);
      fp8GatherRound(dev, 2, round);
    }
    // A stream being captured takes only the exchanges that read nothing
    // on the host (the others are refused: scenario per-batch).
    if (!std::getenv("FAKE_CUDA_CAPTURING")) {
      perBatchGatherRound(dev);
      selectSlotsRound(dev);
      for (int round = 0; round < 2; ++round) {
        packedRound<uint16_t>(dev, round);
        packedRound<float>(dev, round);
      }
    }
    hostCollectives();
  } else if (scenario == "per-batch") {
    perBatchGatherRound(dev);
  } else if (scenario == "bad-ids") { // must end the process on the last rank
    badIds = true;
    allGatherRound<float>(dev, 0);
  } else if (scenario == "host-buffers") {
    const int64_t rows = kSlots * moert_size();
    std::vector<float> x(kHidden, 1.0f), w(kTopK, 0.5f), rx(size_t(rows * kHidden));
    std::vector<float> rw(size_t(rows * kTopK));
    std::vector<int32_t> ids = {0, 1}, rids(size_t(rows * kTopK));
    std::vector<int32_t> expertRank(static_cast<size_t>(kExpertsPerRank * moert_size()));
    for (size_t e = 0; e < expertRank.size(); ++e)
      expertRank[e] = int32_t(e / kExpertsPerRank);
    std::vector<int64_t> plan = {rows, kSlots, kSlots, 0, moert_size(), 0, 0, 0, 0};
    auto xm = memref2(x.data(), 1, kHidden), im = memref2(ids.data(), 1, kTopK);
    auto wm = memref2(w.data(), 1, kTopK);
    auto rm = memref1(expertRank.data(), int64_t(expertRank.size()));
    auto pm = memref1(plan.data(), int64_t(plan.size()));
    auto rxm = memref2(rx.data(), rows, kHidden), rim = memref2(rids.data(), rows, kTopK);
    auto rwm = memref2(rw.data(), rows, kTopK);
    _mlir_ciface_moert_ep_gather_into_f32(&xm, &im, &wm, &rm, &pm, &rxm, &rim, &rwm, nullptr);
    std::fprintf(stderr, "nccl_check: rank %d: the gather on host buffers returned\n",
                 moert_rank());
    return 1;
  } else {
    std::fprintf(stderr, "nccl_check: unknown scenario '%s'\n", scenario.c_str());
    return 2;
  }
  if (moert_barrier("nccl_check.done") != 0) {
    std::fprintf(stderr, "nccl_check: barrier: %s\n", moert_last_error());
    return 1;
  }
  std::printf("nccl_check: rank %d of %d: %s %s\n", moert_rank(), moert_size(), scenario.c_str(),
              failures ? "FAILED" : "passed");
  moert_finalize();
  return failures ? 1 : 0;
}
