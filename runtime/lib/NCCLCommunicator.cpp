//===- NCCLCommunicator.cpp - collectives over NCCL -----------------------===//
//
// NCCL buffers are DEVICE pointers: allToAllV and allGather move device
// memory. allReduce takes host values (as the interface does) and stages
// them through a small device scratch buffer; barrier reduces one value there.
//
// The NCCL communicator is non-blocking (config.blocking = 0) so that no call
// can hang: each returns at once and is then polled, with the stream, against
// the deadline. A stuck NCCL collective cannot be cancelled, so on timeout or
// error the communicator is aborted and later calls fail with the reason.
// Every NCCL call on the communicator holds `ncclCalls`: the watchdog's
// thread polls its error too, and NCCL's calls on one communicator must not
// overlap.
// Collectives on a layer's stream are polled only until NCCL has enqueued
// them: their completion is the watchdog's (NCCLWatchdog.h), which keeps
// the deadline without a host wait ($MOERT_NCCL_HOST_WAIT=1: the host
// polls the stream instead; $MOERT_NCCL_CAPTURE=1: a stream being captured
// into a CUDA graph gets its collectives without the watchdog).
//
// MPI bootstraps NCCL (ranks, unique id) and carries the control channel:
// descriptors go point to point over MPI exactly as in the MPI backend.
//
//===----------------------------------------------------------------------===//
#include "NCCLCommunicator.h"
#include "MPIControl.h"
#include "NCCLWatchdog.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

using namespace moert;

namespace {
std::string ncclText(const char *what, ncclResult_t code, ncclComm_t comm) {
  std::string text = std::string(what) + " failed: " + ncclGetErrorString(code);
  const char *detail = ncclGetLastError(comm);
  if (detail && *detail)
    text += std::string(" (") + detail + ")";
  return text;
}

std::string cudaText(const char *what, cudaError_t code) {
  return std::string(what) + " failed: " + cudaGetErrorName(code) + " (" +
         cudaGetErrorString(code) + ")";
}

/// A 0/1 switch from the environment (unset: 0), naming what each means.
Status envSwitch(const char *name, const char *off, const char *on, bool &value) {
  const char *text = std::getenv(name);
  value = text && std::strcmp(text, "1") == 0;
  if (text && !value && std::strcmp(text, "0") != 0)
    return std::string(name) + "='" + text + "' is not 0 (" + off + ") or 1 (" + on + ")";
  return std::nullopt;
}

/// moert_init's timeout does not reach the factory; use the same default.
std::chrono::milliseconds setupTimeout() {
  const char *env = std::getenv("MOERT_TIMEOUT_MS");
  long long ms = env ? std::atoll(env) : 0;
  return std::chrono::milliseconds(ms > 0 ? ms : 30000);
}

/// This rank's index among the ranks on its host, from an all-gather of
/// host names (nonblocking, unlike MPI_Comm_split_type).
Status localRank(int rank, int size, int &local, Clock::time_point deadline) {
  std::vector<char> names(size_t(size) * MPI_MAX_PROCESSOR_NAME, '\0');
  std::vector<char> mine(MPI_MAX_PROCESSOR_NAME, '\0');
  int length = 0;
  MPI_Get_processor_name(mine.data(), &length);
  std::vector<MPI_Request> request(1);
  int code = MPI_Iallgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                            names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                            MPI_COMM_WORLD, &request[0]);
  if (code != MPI_SUCCESS)
    return mpi::errorText("MPI_Iallgather of host names", code);
  if (Status s = mpi::waitAll(request, deadline, "NCCL setup: host name exchange"))
    return s;
  local = 0;
  for (int r = 0; r < rank; ++r)
    local += std::strncmp(&names[size_t(r) * MPI_MAX_PROCESSOR_NAME],
                          mine.data(), MPI_MAX_PROCESSOR_NAME) == 0;
  return std::nullopt;
}

class NCCLCommunicator final : public Communicator {
public:
  explicit NCCLCommunicator(bool ownsMPI) : ownsMPI(ownsMPI) {
    MPI_Comm_rank(MPI_COMM_WORLD, &myRank);
    MPI_Comm_size(MPI_COMM_WORLD, &mySize);
    control = mpi::duplicateWorld();
  }
  ~NCCLCommunicator() override;

  /// Picks the GPU, creates the stream, scratch buffers and NCCL
  /// communicator, all before `deadline`.
  Status setUp(Clock::time_point deadline);

  int rank() const override { return myRank; }
  int size() const override { return mySize; }
  const char *backend() const override { return "nccl"; }

  Status exchangeDescriptors(const CollectiveDescriptor &mine,
                             std::vector<CollectiveDescriptor> &all,
                             std::vector<int> &missing,
                             Clock::time_point deadline) override {
    return mpi::exchangeDescriptors(control, mine, all, missing, deadline);
  }

  Status allToAllV(const void *send, const int64_t *sendBytes, void *recv,
                   const int64_t *recvBytes,
                   Clock::time_point deadline) override;
  Status allReduce(int64_t *values, int64_t count, ReduceOp op,
                   Clock::time_point deadline) override;
  Status allGather(const void *send, int64_t bytes, void *recv,
                   Clock::time_point deadline) override;
  Status barrier(Clock::time_point deadline) override;
  void useStream(void *layer) override { layerStream = static_cast<cudaStream_t>(layer); }
  Status waitForStream(Clock::time_point deadline, const std::string &collective) override {
    if (!layerStream)
      return std::nullopt;
    if (Status s = begin())
      return s;
    if (watchdog)
      return watchdog->watch(layerStream, deadline, collective);
    std::lock_guard<std::mutex> calls(ncclCalls);
    return finish("collectives on the layer's stream", ncclSuccess, deadline, true, layerStream);
  }
  bool checksOnStream() const override { return watchdog != nullptr; }
  Status checkOnStream(const std::vector<DeviceSpan> &spans, SpanCheck check,
                       Clock::time_point deadline, const std::string &collective) override {
    if (!watchdog || !layerStream)
      return std::string("checks on the stream need the watchdog and the layer's stream");
    if (Status s = begin())
      return s;
    return watchdog->watch(layerStream, deadline, collective, spans, std::move(check));
  }

private:
  /// Fails if an earlier failure aborted the communicator; else makes this
  /// rank's GPU current on the calling thread.
  Status begin();
  /// Checks how an NCCL call returned, then polls until the communicator has
  /// no call in progress and, with `andStream`, the stream (`on`, else the
  /// communicator's own) is idle.
  Status finish(const char *what, ncclResult_t issued, Clock::time_point deadline,
                bool andStream = true, cudaStream_t on = nullptr);
  /// The stream for collectives of device buffers: the layer's, if set.
  cudaStream_t deviceStream() const { return layerStream ? layerStream : stream; }
  /// Aborts the communicator and remembers `message` for later calls.
  Status fail(std::string message);
  /// allToAllV of host buffers, through the scratch buffers.
  Status allToAllVFromHost(const void *send, const int64_t *sendBytes, void *recv,
                           const int64_t *recvBytes, Clock::time_point deadline);
  /// The grouped sends and receives of allToAllV (device buffers), on `on`.
  Status sendAndReceive(const void *send, const int64_t *sendBytes, void *recv,
                        const int64_t *recvBytes, Clock::time_point deadline, cudaStream_t on);
  /// Grows the scratch buffers to hold `count` int64 values.
  Status reserve(int64_t count);
  /// Whether `p` is device (or managed) memory, which NCCL can take.
  static bool onDevice(const void *p) {
    cudaPointerAttributes attributes;
    if (!p || cudaPointerGetAttributes(&attributes, p) != cudaSuccess)
      return false;
    return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  }
  /// Where a collective's buffers are (a null one, for no bytes, goes with
  /// the other): device memory, host memory, or one of each (an error).
  enum class Buffers { Device, Host, Mixed };
  static Buffers buffers(const void *send, const void *recv) {
    const bool sendHost = send && !onDevice(send), recvHost = recv && !onDevice(recv);
    const bool sendDevice = send && !sendHost, recvDevice = recv && !recvHost;
    if ((sendHost && recvDevice) || (sendDevice && recvHost))
      return Buffers::Mixed;
    return sendHost || recvHost ? Buffers::Host : Buffers::Device;
  }

  MPI_Comm control = MPI_COMM_NULL;
  bool ownsMPI;
  int myRank = 0, mySize = 1, device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaStream_t layerStream = nullptr; // useStream
  int64_t *deviceScratch = nullptr; // cudaMalloc'ed
  int64_t *hostScratch = nullptr;   // pinned, so the copy back is async
  int64_t scratchCount = 0;
  Status broken;
  std::mutex ncclCalls; // held around every NCCL call on `comm` after setUp
  /// Keeps the timeout of the layer's collectives without a host wait;
  /// null with $MOERT_NCCL_HOST_WAIT=1 (the host waits for them).
  std::unique_ptr<NCCLWatchdog> watchdog;
};

NCCLCommunicator::~NCCLCommunicator() {
  watchdog.reset(); // the layer's collectives first, each by its deadline
  if (comm) {
    cudaSetDevice(device);
    // Finalize flushes pending work; past the deadline, abort instead.
    ncclResult_t state = ncclCommFinalize(comm);
    auto deadline = Clock::now() + setupTimeout();
    while (state == ncclSuccess || state == ncclInProgress) {
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess)
        state = ncclInternalError;
      if (state != ncclInProgress || Clock::now() > deadline)
        break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (state == ncclSuccess)
      ncclCommDestroy(comm);
    else
      ncclCommAbort(comm);
  }
  if (deviceScratch)
    cudaFree(deviceScratch);
  if (hostScratch)
    cudaFreeHost(hostScratch);
  if (stream)
    cudaStreamDestroy(stream);
  MPI_Comm_free(&control);
  if (ownsMPI)
    MPI_Finalize();
}

Status NCCLCommunicator::setUp(Clock::time_point deadline) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (myRank == 0)
    if (ncclResult_t rc = ncclGetUniqueId(&id))
      return ncclText("ncclGetUniqueId", rc, nullptr);
  std::vector<MPI_Request> request(1);
  int code = MPI_Ibcast(&id, sizeof(id), MPI_BYTE, 0, control, &request[0]);
  if (code != MPI_SUCCESS)
    return mpi::errorText("MPI_Ibcast of the NCCL id", code);
  if (Status s = mpi::waitAll(request, deadline, "NCCL setup: id broadcast"))
    return s;

  int local = 0, devices = 0;
  if (Status s = localRank(myRank, mySize, local, deadline))
    return s;
  if (cudaError_t rc = cudaGetDeviceCount(&devices))
    return cudaText("cudaGetDeviceCount", rc);
  if (devices == 0)
    return std::string("NCCL backend: no CUDA device visible");
  device = local % devices;
  if (cudaError_t rc = cudaSetDevice(device))
    return cudaText("cudaSetDevice", rc);
  if (cudaError_t rc = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking))
    return cudaText("cudaStreamCreateWithFlags", rc);
  if (Status s = reserve(64))
    return s;

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, mySize, id, myRank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    std::string message = ncclText("ncclCommInitRankConfig", rc, comm);
    if (comm)
      ncclCommAbort(comm);
    comm = nullptr;
    return message;
  }
  if (Status s = finish("communicator setup", ncclSuccess, deadline, false))
    return s;
  bool hostWait = false, capture = false;
  if (Status s = envSwitch("MOERT_NCCL_HOST_WAIT",
                           "a watchdog keeps the timeout of the layer's collectives",
                           "the host waits for them", hostWait))
    return s;
  if (Status s = envSwitch(
          "MOERT_NCCL_CAPTURE", "a layer's stream being captured into a CUDA graph is refused",
          "its collectives are captured without a timeout or checks of the ids", capture))
    return s;
  if (hostWait && capture)
    return std::string("MOERT_NCCL_CAPTURE=1 with MOERT_NCCL_HOST_WAIT=1: the host cannot "
                       "wait for a stream being captured into a CUDA graph");
  if (!hostWait)
    watchdog = std::make_unique<NCCLWatchdog>(device, myRank, comm, ncclCalls, capture);
  return std::nullopt;
}

Status NCCLCommunicator::begin() {
  if (broken)
    return "NCCL communicator unusable after an earlier failure: " + *broken;
  if (cudaError_t rc = cudaSetDevice(device))
    return cudaText("cudaSetDevice", rc);
  return std::nullopt;
}

Status NCCLCommunicator::fail(std::string message) {
  if (watchdog)
    watchdog->forgetCommunicator();
  if (comm)
    ncclCommAbort(comm);
  comm = nullptr;
  broken = message;
  return message;
}

Status NCCLCommunicator::finish(const char *what, ncclResult_t issued, Clock::time_point deadline,
                                bool andStream, cudaStream_t on) {
  if (issued != ncclSuccess && issued != ncclInProgress)
    return fail(ncclText(what, issued, comm));
  auto pause = std::chrono::microseconds(20);
  while (true) {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t rc = ncclCommGetAsyncError(comm, &state))
      return fail(ncclText("ncclCommGetAsyncError", rc, comm));
    if (state != ncclSuccess && state != ncclInProgress)
      return fail(ncclText(what, state, comm));
    if (state == ncclSuccess) {
      if (!andStream)
        return std::nullopt;
      cudaError_t query = cudaStreamQuery(on ? on : stream);
      if (query == cudaSuccess)
        return std::nullopt;
      if (query != cudaErrorNotReady)
        return fail(cudaText(what, query));
    }
    if (Clock::now() > deadline)
      return fail(std::string("NCCL ") + what + " timed out on GPU " +
                  std::to_string(device) + " (communicator aborted)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

Status NCCLCommunicator::reserve(int64_t count) {
  if (count <= scratchCount)
    return std::nullopt;
  count = std::max<int64_t>(count, 2 * scratchCount);
  if (deviceScratch)
    cudaFree(deviceScratch);
  if (hostScratch)
    cudaFreeHost(hostScratch);
  deviceScratch = hostScratch = nullptr;
  scratchCount = 0;
  size_t bytes = size_t(count) * sizeof(int64_t);
  if (cudaError_t rc = cudaMalloc(reinterpret_cast<void **>(&deviceScratch), bytes))
    return cudaText("cudaMalloc of the scratch buffer", rc);
  if (cudaError_t rc = cudaMallocHost(reinterpret_cast<void **>(&hostScratch), bytes))
    return cudaText("cudaMallocHost of the scratch buffer", rc);
  scratchCount = count;
  return std::nullopt;
}

Status NCCLCommunicator::allToAllV(const void *send, const int64_t *sendBytes,
                                   void *recv, const int64_t *recvBytes,
                                   Clock::time_point deadline) {
  std::lock_guard<std::mutex> calls(ncclCalls);
  if (Status s = begin())
    return s;
  for (int p = 0; p < mySize; ++p)
    if (sendBytes[p] < 0 || recvBytes[p] < 0)
      return "negative message size to/from rank " + std::to_string(p);
  switch (buffers(send, recv)) {
  case Buffers::Mixed:
    return std::string("all-to-all of a host and a device buffer");
  case Buffers::Host:
    return allToAllVFromHost(send, sendBytes, recv, recvBytes, deadline);
  case Buffers::Device:
    break;
  }
  return sendAndReceive(send, sendBytes, recv, recvBytes, deadline, deviceStream());
}

Status NCCLCommunicator::allToAllVFromHost(const void *send, const int64_t *sendBytes, void *recv,
                                           const int64_t *recvBytes, Clock::time_point deadline) {
  int64_t sent = 0, received = 0;
  for (int p = 0; p < mySize; ++p) {
    sent += sendBytes[p];
    received += recvBytes[p];
  }
  if (Status s = reserve((sent + received + 7) / 8))
    return fail(*s);
  char *device = reinterpret_cast<char *>(deviceScratch);
  char *host = reinterpret_cast<char *>(hostScratch);
  if (sent)
    std::memcpy(host, send, size_t(sent));
  if (cudaError_t rc = cudaMemcpyAsync(device, host, size_t(sent), cudaMemcpyHostToDevice, stream))
    return fail(cudaText("cudaMemcpyAsync to the scratch buffer", rc));
  if (Status s = sendAndReceive(device, sendBytes, device + sent, recvBytes, deadline, stream))
    return s;
  if (cudaError_t rc = cudaMemcpyAsync(host + sent, device + sent, size_t(received),
                                       cudaMemcpyDeviceToHost, stream))
    return fail(cudaText("cudaMemcpyAsync from the scratch buffer", rc));
  if (Status s = finish("all-to-all", ncclSuccess, deadline))
    return s;
  if (received)
    std::memcpy(recv, host + sent, size_t(received));
  return std::nullopt;
}

Status NCCLCommunicator::sendAndReceive(const void *send, const int64_t *sendBytes, void *recv,
                                        const int64_t *recvBytes, Clock::time_point deadline,
                                        cudaStream_t on) {
  auto *in = static_cast<const char *>(send);
  auto *out = static_cast<char *>(recv);
  ncclResult_t rc = ncclGroupStart();
  for (int p = 0; p < mySize && rc == ncclSuccess; ++p) {
    if (sendBytes[p] > 0)
      rc = ncclSend(in, size_t(sendBytes[p]), ncclInt8, p, comm, on);
    if (recvBytes[p] > 0 && rc == ncclSuccess)
      rc = ncclRecv(out, size_t(recvBytes[p]), ncclInt8, p, comm, on);
    in += sendBytes[p];
    out += recvBytes[p];
  }
  // Close the group even after a failed call, or NCCL stays in group mode.
  ncclResult_t end = ncclGroupEnd();
  return finish("all-to-all", rc != ncclSuccess ? rc : end, deadline, on != layerStream, on);
}

Status NCCLCommunicator::allReduce(int64_t *values, int64_t count, ReduceOp op,
                                   Clock::time_point deadline) {
  std::lock_guard<std::mutex> calls(ncclCalls);
  if (Status s = begin())
    return s;
  if (count <= 0)
    return std::nullopt;
  if (Status s = reserve(count))
    return fail(*s);
  size_t bytes = size_t(count) * sizeof(int64_t);
  std::memcpy(hostScratch, values, bytes);
  if (cudaError_t rc = cudaMemcpyAsync(deviceScratch, hostScratch, bytes,
                                       cudaMemcpyHostToDevice, stream))
    return fail(cudaText("cudaMemcpyAsync to the scratch buffer", rc));
  ncclResult_t rc = ncclAllReduce(deviceScratch, deviceScratch, size_t(count),
                                  ncclInt64, op == ReduceOp::Sum ? ncclSum : ncclMax,
                                  comm, stream);
  // A non-blocking call may still be enqueuing; the copy back must follow it.
  if (Status s = finish("all-reduce", rc, deadline, false))
    return s;
  if (cudaError_t rc = cudaMemcpyAsync(hostScratch, deviceScratch, bytes,
                                       cudaMemcpyDeviceToHost, stream))
    return fail(cudaText("cudaMemcpyAsync from the scratch buffer", rc));
  if (Status s = finish("all-reduce", ncclSuccess, deadline))
    return s;
  std::memcpy(values, hostScratch, bytes);
  return std::nullopt;
}

Status NCCLCommunicator::allGather(const void *send, int64_t bytes, void *recv,
                                   Clock::time_point deadline) {
  std::lock_guard<std::mutex> calls(ncclCalls);
  if (Status s = begin())
    return s;
  if (bytes < 0)
    return "all-gather of " + std::to_string(bytes) + " bytes";
  if (bytes == 0)
    return std::nullopt;
  const Buffers where = buffers(send, recv);
  if (where == Buffers::Mixed)
    return std::string("all-gather of a host and a device buffer");
  if (where == Buffers::Device) // on the layer's stream: enqueued is enough
    return finish("all-gather",
                  ncclAllGather(send, recv, size_t(bytes), ncclInt8, comm, deviceStream()),
                  deadline, !layerStream);
  // Host values (moert_allgather): through the scratch buffers, in place.
  const size_t all = size_t(bytes) * size_t(mySize), mine = size_t(bytes) * size_t(myRank);
  if (Status s = reserve(int64_t((all + sizeof(int64_t) - 1) / sizeof(int64_t))))
    return fail(*s);
  char *device = reinterpret_cast<char *>(deviceScratch);
  char *host = reinterpret_cast<char *>(hostScratch);
  std::memcpy(host + mine, send, size_t(bytes));
  if (cudaError_t rc = cudaMemcpyAsync(device + mine, host + mine, size_t(bytes),
                                       cudaMemcpyHostToDevice, stream))
    return fail(cudaText("cudaMemcpyAsync to the scratch buffer", rc));
  ncclResult_t rc = ncclAllGather(device + mine, device, size_t(bytes), ncclInt8, comm, stream);
  if (Status s = finish("all-gather", rc, deadline, false))
    return s;
  if (cudaError_t rc = cudaMemcpyAsync(host, device, all, cudaMemcpyDeviceToHost, stream))
    return fail(cudaText("cudaMemcpyAsync from the scratch buffer", rc));
  if (Status s = finish("all-gather", ncclSuccess, deadline))
    return s;
  std::memcpy(recv, host, all);
  return std::nullopt;
}

Status NCCLCommunicator::barrier(Clock::time_point deadline) {
  std::lock_guard<std::mutex> calls(ncclCalls);
  if (Status s = begin())
    return s;
  return finish("barrier",
                ncclAllReduce(deviceScratch, deviceScratch, 1, ncclInt64,
                              ncclSum, comm, stream),
                deadline);
}
} // namespace

std::unique_ptr<Communicator> moert::createNCCLCommunicator(Status &error) {
  bool initializedHere = false;
  if ((error = mpi::initialize(initializedHere)))
    return nullptr;
  auto deadline = Clock::now() + setupTimeout();
  // Owns MPI from here on, so a failed setup still finalizes what it started.
  auto communicator = std::make_unique<NCCLCommunicator>(initializedHere);
  if ((error = communicator->setUp(deadline)))
    return nullptr;
  return communicator;
}

// libmoert opens this library for the nccl backend and creates the
// communicator through this entry (same build, so C++ types cross it).
extern "C" moert::Communicator *moert_cuda_create_nccl_communicator(moert::Status *error) {
  return moert::createNCCLCommunicator(*error).release();
}
