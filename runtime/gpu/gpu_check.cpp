//===- gpu_check.cpp - the NCCL backend's collectives on real GPUs --------===//
//
// Run under mpirun on a machine with a GPU (see run_gpu_check.sh). Each rank
// fills device buffers from a formula every rank can evaluate, runs the
// collectives through moert::Collectives over the NCCL communicator (and a
// few through the C API), and checks the results on the host. One line per
// check; the exit status is non-zero if any check failed.
//
//===----------------------------------------------------------------------===//
#include "moert/moert.h"

#include "Collectives.h"
#include "NCCLCommunicator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace moert;

namespace {
int rank = -1, failures = 0;

void report(const std::string &check, const std::string &problem) {
  std::printf("rank %d: %s %s%s%s\n", rank, problem.empty() ? "PASS" : "FAIL",
              check.c_str(), problem.empty() ? "" : ": ", problem.c_str());
  std::fflush(stdout);
  failures += !problem.empty();
}

/// "" when `status` is success and `got` equals `want`, else what differed.
template <typename T>
std::string compare(const Status &status, const std::vector<T> &got,
                    const std::vector<T> &want) {
  if (status)
    return *status;
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i])
      return "element " + std::to_string(i) + " is " + std::to_string(got[i]) +
             ", expected " + std::to_string(want[i]);
  return "";
}

/// A device copy of `host` (or `count` uninitialized elements).
template <typename T> T *toDevice(const std::vector<T> &host, size_t count) {
  void *pointer = nullptr;
  if (cudaMalloc(&pointer, std::max<size_t>(count, 1) * sizeof(T)) != cudaSuccess)
    return nullptr;
  cudaMemcpy(pointer, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  // A pageable copy may return before its bytes land, and the checks'
  // streams do not wait for the legacy one.
  cudaDeviceSynchronize();
  return static_cast<T *>(pointer);
}

template <typename T> std::vector<T> toHost(const T *device, size_t count) {
  std::vector<T> host(count);
  cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost);
  return host;
}

/// Elements rank `from` sends to rank `to`.
int64_t elementsBetween(int from, int to) { return 1 + (from + 2 * to) % 3; }
int32_t payload(int from, int to, int64_t i) {
  return int32_t(from * 10000 + to * 100 + i);
}

void checkAllToAllV(Collectives &coll, int n) {
  std::vector<int32_t> send, want;
  std::vector<int64_t> sendBytes(n), recvBytes(n);
  for (int p = 0; p < n; ++p) {
    sendBytes[p] = elementsBetween(rank, p) * 4;
    recvBytes[p] = elementsBetween(p, rank) * 4;
    for (int64_t i = 0; i < elementsBetween(rank, p); ++i)
      send.push_back(payload(rank, p, i));
    for (int64_t i = 0; i < elementsBetween(p, rank); ++i)
      want.push_back(payload(p, rank, i));
  }
  int32_t *dSend = toDevice(send, send.size());
  int32_t *dRecv = toDevice(std::vector<int32_t>(), want.size());
  Status s = coll.allToAllV("check.alltoallv", dSend, sendBytes.data(), dRecv,
                            recvBytes.data());
  report("allToAllV", compare(s, toHost(dRecv, want.size()), want));
  cudaFree(dSend);
  cudaFree(dRecv);
}

void checkAllReduce(Collectives &coll, int n) {
  std::vector<int64_t> sum = {rank + 1, -rank, int64_t(1) << 40};
  std::vector<int64_t> wantSum = {int64_t(n) * (n + 1) / 2,
                                  -int64_t(n) * (n - 1) / 2, int64_t(n) << 40};
  Status s = coll.allReduce("check.allreduce.sum", sum.data(), 3, ReduceOp::Sum);
  report("allReduce sum", compare(s, sum, wantSum));

  std::vector<int64_t> max = {10 * rank, -rank};
  std::vector<int64_t> wantMax = {10 * int64_t(n - 1), 0};
  s = coll.allReduce("check.allreduce.max", max.data(), 2, ReduceOp::Max);
  report("allReduce max", compare(s, max, wantMax));
}

void checkAllGather(Collectives &coll, int n) {
  constexpr int k = 5;
  std::vector<int32_t> send, want;
  for (int i = 0; i < k; ++i)
    send.push_back(payload(rank, 0, i));
  for (int p = 0; p < n; ++p)
    for (int i = 0; i < k; ++i)
      want.push_back(payload(p, 0, i));
  int32_t *dSend = toDevice(send, k);
  int32_t *dRecv = toDevice(std::vector<int32_t>(), want.size());
  Status s = coll.allGather("check.allgather", dSend, k * 4, dRecv);
  report("allGather", compare(s, toHost(dRecv, want.size()), want));
  cudaFree(dSend);
  cudaFree(dRecv);
}

/// Host buffers (moert_allgather, the packed exchange): through the
/// communicator's scratch buffers.
void checkHostBuffers(Collectives &coll, int n) {
  std::vector<int32_t> send = {rank, 7 * rank}, got(size_t(2 * n), -1), want;
  for (int p = 0; p < n; ++p)
    want.insert(want.end(), {p, 7 * p});
  report("allGather of host buffers",
         compare(coll.allGather("check.host.allgather", send.data(), 8, got.data()), got, want));
  std::vector<int64_t> bytes(static_cast<size_t>(n), 4);
  const size_t ranks = static_cast<size_t>(n);
  std::vector<int32_t> to(ranks), from(ranks, -1), expect(ranks);
  for (int p = 0; p < n; ++p) {
    to[size_t(p)] = payload(rank, p, 0);
    expect[size_t(p)] = payload(p, rank, 0);
  }
  report("allToAllV of host buffers",
         compare(coll.allToAllV("check.host.alltoallv", to.data(), bytes.data(), from.data(),
                                bytes.data()),
                 from, expect));
}

/// Device buffers on a layer's stream, after a copy enqueued there, with one
/// wait at the end (the all-gather exchange's form).
void checkLayerStream(Collectives &coll, int n) {
  cudaStream_t layer = nullptr;
  cudaStreamCreateWithFlags(&layer, cudaStreamNonBlocking);
  constexpr int k = 1 << 16; // large enough that a copy is not instant
  std::vector<int32_t> send(k), want;
  for (int i = 0; i < k; ++i)
    send[size_t(i)] = payload(rank, 1, i);
  for (int p = 0; p < n; ++p)
    for (int i = 0; i < k; ++i)
      want.push_back(payload(p, 1, i));
  int32_t *dRecv = toDevice(std::vector<int32_t>(), want.size());
  int32_t *mine = dRecv + size_t(rank) * k;
  cudaMemcpyAsync(mine, send.data(), k * 4, cudaMemcpyHostToDevice, layer);
  Status s;
  {
    Collectives::StreamScope onLayer(coll, layer, "check.layer.allgather");
    s = coll.allGather("check.layer.allgather", mine, k * 4, dRecv);
    if (!s)
      s = onLayer.wait(); // the watchdog's from here: the host does not wait
  }
  cudaStreamSynchronize(layer); // as the layer's caller would, before reading
  report("allGather in place on a layer's stream", compare(s, toHost(dRecv, want.size()), want));
  cudaFree(dRecv);
  cudaStreamDestroy(layer);
}

/// A check of device bytes where the layer's stream passes them, run by the
/// watchdog on pinned copies (how the all-gather exchange checks its ids).
std::atomic<int64_t> checkedSum{-1};
void checkOnTheStream(Collectives &coll) {
  cudaStream_t layer = nullptr;
  cudaStreamCreateWithFlags(&layer, cudaStreamNonBlocking);
  constexpr int k = 1 << 16;
  std::vector<int32_t> values(k, 3);
  int32_t *device = toDevice(std::vector<int32_t>(), k);
  cudaMemsetAsync(device, 0, k * 4, layer);
  cudaMemcpyAsync(device, values.data(), k * 4, cudaMemcpyHostToDevice, layer);
  Status s;
  {
    Collectives::StreamScope onLayer(coll, layer, "check.stream.check");
    s = coll.checkOnStream("check.stream.check", {{device, k * 4}},
                           [](const std::vector<const void *> &host) -> Status {
                             const auto *v = static_cast<const int32_t *>(host[0]);
                             int64_t sum = 0;
                             for (int i = 0; i < k; ++i)
                               sum += v[i];
                             checkedSum = sum;
                             return std::nullopt;
                           });
  }
  cudaStreamSynchronize(layer);
  for (int i = 0; i < 1000 && checkedSum < 0; ++i) // the watchdog polls at most every ms
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  report("a check on pinned copies where the stream passes them",
         s                     ? *s
         : checkedSum == 3 * k ? ""
                               : "the check saw a sum of " + std::to_string(checkedSum.load()) +
                                     ", expected " + std::to_string(3 * k));
  cudaFree(device);
  cudaStreamDestroy(layer);
}

/// The all-gather exchange of the C API (moert_ep_gather_into_f32 and
/// moert_ep_return_into_f32) on device buffers and a stream: no host wait,
/// the ids checked by the watchdog. With `capture`: the two calls captured
/// into a CUDA graph in that mode ($MOERT_NCCL_CAPTURE=1, run_gpu_check.sh;
/// global is PyTorch's default) and the graph replayed twice, with new rows
/// before the second replay.
void checkGatherExchange(int n, std::optional<cudaStreamCaptureMode> capture) {
  const bool inGraph = capture.has_value();
  constexpr int64_t tokens = 2, hidden = 4, topK = 2, slots = 2, perRank = 2;
  const int64_t rows = n * slots, experts = perRank * n;
  const std::string name =
      std::string("all-gather exchange on device buffers and a stream (C "
                  "API") +
      (!inGraph                                  ? ")"
       : *capture == cudaStreamCaptureModeGlobal ? ", captured in a CUDA graph, global mode)"
                                                 : ", captured in a CUDA graph, relaxed mode)");
  cudaStream_t layer = nullptr;
  cudaStreamCreateWithFlags(&layer, cudaStreamNonBlocking);
  auto rowsFrom = [&](int base) {
    std::vector<float> x(tokens * hidden);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = float(base + int(i));
    return x;
  };
  std::vector<float> weights = {0.5f, 0.25f, 1.0f, 2.0f};
  std::vector<int32_t> ids = {0, int32_t(experts - 1), -1, 1};
  std::vector<int32_t> expertRank(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e)
    expertRank[size_t(e)] = int32_t(e / perRank);
  std::vector<int64_t> plan = {rows, slots, slots, 0, n, 0, 0, 0, 0, experts};
  float *dx = toDevice(rowsFrom(rank * 100), size_t(tokens * hidden));
  float *dw = toDevice(weights, weights.size());
  int32_t *dids = toDevice(ids, ids.size()), *drank = toDevice(expertRank, expertRank.size());
  float *dreceived = toDevice(std::vector<float>(), size_t(rows * hidden));
  int32_t *dgids = toDevice(std::vector<int32_t>(), size_t(rows * topK));
  float *dgw = toDevice(std::vector<float>(), size_t(rows * topK));
  float *dreturned = toDevice(std::vector<float>(), size_t(rows * hidden));
  auto m2 = [](void *p, int64_t r, int64_t c) { return moert_memref2d{p, p, 0, {r, c}, {c, 1}}; };
  auto xm = m2(dx, tokens, hidden), im = m2(dids, tokens, topK), wm = m2(dw, tokens, topK);
  moert_memref1d rm{drank, drank, 0, {experts}, {1}};
  moert_memref1d pm{plan.data(), plan.data(), 0, {int64_t(plan.size())}, {1}};
  auto rxm = m2(dreceived, rows, hidden), gim = m2(dgids, rows, topK), gwm = m2(dgw, rows, topK);
  auto retm = m2(dreturned, rows, hidden);
  auto exchange = [&] {
    const int64_t handle =
        _mlir_ciface_moert_ep_gather_into_f32(&xm, &im, &wm, &rm, &pm, &rxm, &gim, &gwm, layer);
    // The partial rows: the received ones as they came.
    _mlir_ciface_moert_ep_return_into_f32(&rxm, handle, &retm, layer);
  };
  // What arrived when every rank p sent rows from p * 100 + base.
  auto verify = [&](int base) {
    std::vector<float> received = toHost(dreceived, size_t(rows * hidden));
    std::vector<int32_t> gids = toHost(dgids, size_t(rows * topK));
    std::string problem;
    for (int64_t r = 0; r < rows && problem.empty(); ++r) {
      const int from = int(r / slots);
      const int64_t t = r % slots;
      for (int64_t c = 0; c < hidden; ++c)
        if (received[size_t(r * hidden + c)] != float(from * 100 + base + int(t * hidden + c)))
          problem = "received row " + std::to_string(r) + " col " + std::to_string(c);
      for (int64_t j = 0; j < topK; ++j)
        if (gids[size_t(r * topK + j)] != ids[size_t(t * topK + j)])
          problem = "gathered id " + std::to_string(r) + "," + std::to_string(j);
    }
    std::vector<float> returned = toHost(dreturned, size_t(rows * hidden));
    for (int64_t r = 0; r < rows && problem.empty(); ++r) // rank p returns my block p
      for (int64_t c = 0; c < hidden; ++c)
        if (returned[size_t(r * hidden + c)] !=
            float(rank * 100 + base + int((r % slots) * hidden + c)))
          problem = "returned row " + std::to_string(r) + " col " + std::to_string(c);
    return problem;
  };
  std::string problem;
  if (!inGraph) {
    exchange();
    cudaStreamSynchronize(layer);
    problem = verify(0);
  } else {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t replay = nullptr;
    cudaError_t rc = cudaStreamBeginCapture(layer, *capture);
    if (rc == cudaSuccess) {
      exchange();
      rc = cudaStreamEndCapture(layer, &graph);
    }
    if (rc == cudaSuccess)
      rc = cudaGraphInstantiate(&replay, graph, 0);
    for (int base : {0, 7}) {
      if (rc != cudaSuccess || !problem.empty())
        break;
      std::vector<float> x = rowsFrom(rank * 100 + base);
      rc = cudaMemcpyAsync(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice,
                           layer); // in order with the replay
      if (rc == cudaSuccess)
        rc = cudaGraphLaunch(replay, layer);
      if (rc == cudaSuccess)
        rc = cudaStreamSynchronize(layer);
      if (rc == cudaSuccess)
        problem = verify(base);
      if (!problem.empty())
        problem = "replay with rows from " + std::to_string(base) + ": " + problem;
    }
    if (rc != cudaSuccess)
      problem = std::string("CUDA graph: ") + cudaGetErrorString(rc);
    if (replay)
      cudaGraphExecDestroy(replay);
    if (graph)
      cudaGraphDestroy(graph);
  }
  report(name, problem);
  for (void *p :
       {static_cast<void *>(dx), static_cast<void *>(dw), static_cast<void *>(dids),
        static_cast<void *>(drank), static_cast<void *>(dreceived), static_cast<void *>(dgids),
        static_cast<void *>(dgw), static_cast<void *>(dreturned)})
    cudaFree(p);
  cudaStreamDestroy(layer);
}

void checkCounters(Collectives &coll) {
  auto &calls = coll.counters().collectives;
  bool counted = calls.count("check.alltoallv") && calls.count("check.barrier") &&
                 calls["check.allreduce.sum"].calls == 1;
  report("counters", counted ? "" : "collectives were not counted");
}
} // namespace

int main() {
  // The C API's communicator initializes (and at the end finalizes) MPI.
  if (moert_init("nccl", 30000) != 0) {
    std::printf("FAIL moert_init(\"nccl\"): %s\n", moert_last_error());
    return 1;
  }
  rank = moert_rank();
  int n = moert_size();
  report("moert_init nccl", "");

  std::vector<int64_t> values = {rank + 1};
  int rc = moert_allreduce_i64("check.capi.allreduce", values.data(), 1, 0);
  report("moert_allreduce_i64",
         rc ? moert_last_error()
            : compare(Status(), values, {int64_t(n) * (n + 1) / 2}));
  report("moert_barrier",
         moert_barrier("check.capi.barrier") ? moert_last_error() : "");
  std::vector<char> json(4096);
  moert_counters_json(json.data(), int64_t(json.size()));
  report("counters name the backend",
         std::strstr(json.data(), "nccl") ? "" : "no \"nccl\" in " +
                                                    std::string(json.data()));

  checkGatherExchange(n, std::nullopt);
  // Without $MOERT_NCCL_CAPTURE=1 a captured layer's exchange is refused.
  if (const char *captures = std::getenv("MOERT_NCCL_CAPTURE"); captures && *captures == '1')
    for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeRelaxed, cudaStreamCaptureModeGlobal})
      checkGatherExchange(n, mode);
  else
    std::printf("SKIP all-gather exchange captured in a CUDA graph: $MOERT_NCCL_CAPTURE is "
                "not 1\n");

  {
    Status error;
    std::unique_ptr<Communicator> comm = createNCCLCommunicator(error);
    if (!comm) {
      report("createNCCLCommunicator", error.value_or("no communicator"));
    } else {
      Collectives coll(std::move(comm), std::chrono::milliseconds(30000));
      report("communicator size", coll.size() == n ? "" : "size differs");
      checkAllToAllV(coll, n);
      checkAllReduce(coll, n);
      checkAllGather(coll, n);
      checkHostBuffers(coll, n);
      checkLayerStream(coll, n);
      checkOnTheStream(coll);
      report("barrier", coll.barrier("check.barrier").value_or(""));
      checkCounters(coll);
    }
  }
  moert_finalize();
  std::printf("rank %d: %s (%d failed)\n", rank, failures ? "FAILED" : "OK",
              failures);
  return failures ? 1 : 0;
}
