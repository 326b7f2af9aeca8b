//===- FakeNccl.cpp - cudart and non-blocking NCCL on fake device pages ---===//
//
// With FakeDeviceCopies.cpp and the real NCCLCommunicator.cpp this makes a
// stand-in for libmoert_cuda.so ($MOERT_CUDA_LIBRARY) on machines without a
// GPU, so that the nccl backend's code runs under mpirun in CI:
//
// - device memory is FakeDeviceCopies' pages that only copies may touch, so
//   a runtime that handed NCCL a host buffer, or read a device buffer itself,
//   fails the test (a host buffer makes the NCCL call fail, as the real one
//   fails on unregistered host memory);
// - NCCL calls behave as a non-blocking communicator's (config.blocking =
//   0) and return ncclInProgress. On the communicator's own stream a
//   collective posts its MPI transfer at once, and ncclCommGetAsyncError
//   reports ncclInProgress until the transfer is done, then copies what
//   arrived into device memory. On the layer's stream (the one
//   FakeDeviceCopies expects) the collective is enqueued after the copies
//   before it, as stream order does: it reads its send buffer, posts, waits
//   for the transfer and writes what arrived when the stream's work runs
//   (the test reads device memory, or the runtime waits for the stream), so
//   ncclCommGetAsyncError reports it enqueued at once;
// - events complete in stream order (cudaEventQuery, thread-safe: the
//   runtime's watchdog polls them from its own thread);
// - $FAKE_NCCL_STALL=R or $FAKE_NCCL_FAIL=R: rank R's first all-gather is
//   never posted (its peers wait for it; on the layer's stream the
//   stream's work then never ends), or fails. $FAKE_NCCL_ASYNC_FAIL=R: it
//   fails once the stream reaches it (ncclCommGetAsyncError reports
//   ncclRemoteError from then on) and never ends, as NCCL's kernels wait
//   when a peer or the network is gone;
// - $FAKE_CUDA_CAPTURING=1: every stream reports being captured into a
//   CUDA graph (its work still runs);
// - ncclCommGetAsyncError called from another thread than the one that
//   made the communicator (the runtime's watchdog) only reads the error:
//   the transfers progress on the communicator's thread;
// - calls on one communicator that overlap end the test (NCCL's must not:
//   since 2.26 ncclCommGetAsyncError completes and frees the group job that
//   ncclGroupEnd links); another thread's ncclCommGetAsyncError lasts a
//   millisecond, so that an overlap is likely to be seen.
//
//===----------------------------------------------------------------------===//
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

extern "C" {
void *fake_device_alloc(size_t bytes);
void fake_device_copy_now(void *dst, const void *src, size_t n);
int fake_device_holds(const void *p, size_t n);
int fake_device_idle(void *stream);
}
bool fakeDeviceEnqueue(void *stream, std::function<bool()> work);

namespace {
/// A transfer in flight: its MPI request and where its bytes go when done.
struct Transfer {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<char> host;
  void *device = nullptr; // receives `host` when done; null for sends
  bool stalled = false;   // never posted ($FAKE_NCCL_STALL)
};

struct PointToPoint {
  bool send;
  void *buffer;
  size_t bytes;
  int peer;
  ncclComm_t comm;
  cudaStream_t stream;
};

int groupDepth = 0;
std::vector<PointToPoint> grouped;
bool injected = false;

/// A collective's transfers and how to post them (reading its send buffers).
struct Job {
  std::vector<std::shared_ptr<Transfer>> transfers;
  std::function<void()> post;
};

/// `job` as the stream's work: posted when the stream reaches it, then
/// done once its transfers are (what arrived then written to the device).
/// A stalled collective never ends; one that fails there sets `error`
/// first.
std::function<bool()> streamWork(Job job, bool stalled, std::atomic<ncclResult_t> *error) {
  auto posted = std::make_shared<bool>(false);
  return [job, stalled, error, posted] {
    if (error)
      *error = ncclRemoteError;
    if (stalled || error)
      return false;
    if (!*posted) {
      job.post();
      *posted = true;
    }
    for (auto &t : job.transfers) {
      int done = 0;
      MPI_Test(&t->request, &done, MPI_STATUS_IGNORE);
      if (!done)
        return false;
    }
    for (auto &t : job.transfers)
      if (t->device)
        fake_device_copy_now(t->device, t->host.data(), t->host.size());
    return true;
  };
}

struct FakeEvent {
  std::atomic<bool> done{true};
};

/// Which fault, if any, this rank injects into its first collective.
enum class Fault { None, Stall, Fail, AsyncFail };
Fault faultFor(int rank) {
  for (auto [name, fault] :
       {std::pair{"FAKE_NCCL_STALL", Fault::Stall}, std::pair{"FAKE_NCCL_FAIL", Fault::Fail},
        std::pair{"FAKE_NCCL_ASYNC_FAIL", Fault::AsyncFail}})
    if (const char *value = std::getenv(name); value && std::atoi(value) == rank)
      return fault;
  return Fault::None;
}

size_t typeBytes(ncclDataType_t type) {
  switch (type) {
  case ncclInt8:
  case ncclUint8:
    return 1;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32:
    return 4;
  case ncclInt64:
  case ncclUint64:
  case ncclFloat64:
    return 8;
  default:
    return 0;
  }
}
} // namespace

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 0;
  bool starting = true; // the first poll completes the set-up
  std::atomic<ncclResult_t> asyncError{ncclSuccess};
  std::thread::id owner = std::this_thread::get_id();
  std::atomic<int> callers{0}; // threads inside a call on this communicator
  std::vector<std::shared_ptr<Transfer>> inFlight;

  /// The fault this rank injects into its first all-gather, if any.
  Fault admit() {
    if (injected)
      return Fault::None;
    injected = true;
    return faultFor(rank);
  }
  /// Starts `job` on `stream`: in order with the test stream's work, or
  /// now, polled by ncclCommGetAsyncError.
  ncclResult_t start(cudaStream_t stream, Job job, Fault fault = Fault::None) {
    if (fault == Fault::Fail) {
      asyncError = ncclSystemError;
      return ncclInProgress;
    }
    const bool stalled = fault == Fault::Stall, failsRunning = fault == Fault::AsyncFail;
    if (fakeDeviceEnqueue(stream, streamWork(job, stalled, failsRunning ? &asyncError : nullptr)))
      return ncclInProgress;
    if (failsRunning) {
      asyncError = ncclRemoteError;
      return ncclInProgress;
    }
    if (stalled) {
      inFlight.push_back(std::make_shared<Transfer>());
      inFlight.back()->stalled = true;
      return ncclInProgress;
    }
    job.post();
    inFlight.insert(inFlight.end(), job.transfers.begin(), job.transfers.end());
    return ncclInProgress;
  }
};

/// A call on `comm` for its duration; one that overlaps another ends the test.
class Alone {
public:
  Alone(ncclComm_t comm, const char *call) : comm(comm) {
    if (comm && comm->callers.fetch_add(1) != 0) {
      std::fprintf(stderr,
                   "fake NCCL: %s while another thread was inside an NCCL call on the "
                   "same communicator (NCCL's calls on one communicator must not overlap)\n",
                   call);
      std::abort();
    }
  }
  ~Alone() {
    if (comm)
      comm->callers.fetch_sub(1);
  }
  Alone(const Alone &) = delete;
  Alone &operator=(const Alone &) = delete;

private:
  ncclComm_t comm;
};

std::shared_ptr<Transfer> transfer(size_t bytes, void *device) {
  auto t = std::make_shared<Transfer>();
  t->host.resize(bytes);
  t->device = device;
  return t;
}

extern "C" {
// cudart: one device; a stream is idle once its work has run (a query runs
// what can run).
cudaError_t cudaGetDeviceCount(int *count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int) {
  static char streams[16];
  static int next = 0;
  *stream = reinterpret_cast<cudaStream_t>(&streams[next++ % 16]);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
/// $FAKE_CUDA_CAPTURING=1: every stream is being captured (the work still
/// runs, as if the graph were replayed at once).
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus *status) {
  const char *capturing = std::getenv("FAKE_CUDA_CAPTURING");
  *status = capturing && std::strcmp(capturing, "1") == 0 ? cudaStreamCaptureStatusActive
                                                          : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode *) { return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int) {
  *event = reinterpret_cast<cudaEvent_t>(new FakeEvent);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<FakeEvent *>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  auto *e = reinterpret_cast<FakeEvent *>(event);
  e->done = false;
  if (!fakeDeviceEnqueue(stream, [e] { return e->done = true; }))
    e->done = true;
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return reinterpret_cast<FakeEvent *>(event)->done ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return fake_device_idle(stream) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaMalloc(void **p, size_t bytes) {
  *p = fake_device_alloc(bytes);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *) { return cudaSuccess; } // pages stay reserved
cudaError_t cudaMallocHost(void **p, size_t bytes) {
  *p = std::malloc(bytes);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void *p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *attributes, const void *p) {
  std::memset(attributes, 0, sizeof(*attributes));
  attributes->type = fake_device_holds(p, 1) ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
  return cudaSuccess;
}
/// On the layer's stream in order with its work (a host source read at
/// once, as the driver reads pageable memory), elsewhere at once.
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  const bool toDevice = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool fromDevice = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (fake_device_holds(dst, bytes) != toDevice || fake_device_holds(src, bytes) != fromDevice)
    return cudaErrorInvalidValue;
  std::shared_ptr<std::vector<char>> hostBytes;
  if (!fromDevice)
    hostBytes = std::make_shared<std::vector<char>>(static_cast<const char *>(src),
                                                    static_cast<const char *>(src) + bytes);
  const void *from = hostBytes ? hostBytes->data() : src;
  if (!fakeDeviceEnqueue(stream, [dst, from, bytes, hostBytes] {
        fake_device_copy_now(dst, from, bytes);
        return true;
      }))
    fake_device_copy_now(dst, from, bytes);
  return cudaSuccess;
}
const char *cudaGetErrorName(cudaError_t error) {
  return error == cudaSuccess ? "cudaSuccess" : "cudaErrorFake";
}
const char *cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "fake CUDA error";
}

// NCCL over MPI, non-blocking.
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  std::memset(id, 0, sizeof(*id));
  return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId, int rank,
                                    ncclConfig_t *config) {
  auto comm = std::make_unique<ncclComm>();
  MPI_Comm_dup(MPI_COMM_WORLD, &comm->mpi);
  MPI_Comm_rank(comm->mpi, &comm->rank);
  MPI_Comm_size(comm->mpi, &comm->size);
  if (comm->rank != rank || comm->size != nranks || !config || config->blocking != 0)
    return ncclInvalidArgument; // the runtime must ask for a non-blocking one
  *out = comm.release();
  return ncclInProgress;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state) {
  Alone alone(comm, "ncclCommGetAsyncError");
  if (std::this_thread::get_id() != comm->owner) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    *state = comm->asyncError;
    return ncclSuccess;
  }
  if (comm->starting) {
    comm->starting = false;
    *state = ncclInProgress;
    return ncclSuccess;
  }
  if (comm->asyncError != ncclSuccess) {
    *state = comm->asyncError;
    return ncclSuccess;
  }
  for (auto &t : comm->inFlight) {
    int done = 0;
    if (!t->stalled)
      MPI_Test(&t->request, &done, MPI_STATUS_IGNORE);
    if (!done) {
      *state = ncclInProgress;
      return ncclSuccess;
    }
  }
  for (auto &t : comm->inFlight)
    if (t->device)
      fake_device_copy_now(t->device, t->host.data(), t->host.size());
  comm->inFlight.clear();
  *state = ncclSuccess;
  return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  { Alone alone(comm, "ncclCommDestroy"); }
  MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  Alone alone(comm, "ncclCommAbort");
  return ncclSuccess; // MPI may still write into its buffers: keep them
}
const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSystemError:
    return "unhandled system error (injected)";
  case ncclRemoteError:
    return "remote process exited or there was a network error (injected)";
  case ncclInvalidArgument:
    return "invalid argument (a host buffer or a size the fake cannot take)";
  case ncclInvalidUsage:
    return "invalid usage (overlapping buffers, or a group end without a start)";
  default:
    return "fake NCCL error";
  }
}
const char *ncclGetLastError(ncclComm_t) { return ""; }

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  Alone alone(comm, "ncclAllGather");
  const size_t bytes = count * typeBytes(type);
  if (!bytes || !fake_device_holds(send, bytes) ||
      !fake_device_holds(recv, bytes * size_t(comm->size)))
    return ncclInvalidArgument;
  // Overlapping buffers are undefined unless exactly in place: send is
  // recv's block of this rank.
  const char *from = static_cast<const char *>(send), *to = static_cast<const char *>(recv);
  if (from < to + bytes * size_t(comm->size) && to < from + bytes &&
      from != to + bytes * size_t(comm->rank))
    return ncclInvalidUsage;
  auto mine = transfer(bytes, nullptr), all = transfer(bytes * size_t(comm->size), recv);
  Job job{{mine, all}, [=] {
            fake_device_copy_now(mine->host.data(), send, bytes);
            MPI_Iallgather(mine->host.data(), int(bytes), MPI_BYTE, all->host.data(), int(bytes),
                           MPI_BYTE, comm->mpi, &all->request);
          }};
  return comm->start(stream, job, comm->admit());
}
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  Alone alone(comm, "ncclAllReduce");
  const size_t bytes = count * typeBytes(type);
  if (type != ncclInt64 || (op != ncclSum && op != ncclMax) || !fake_device_holds(send, bytes) ||
      !fake_device_holds(recv, bytes))
    return ncclInvalidArgument;
  auto in = transfer(bytes, nullptr), out = transfer(bytes, recv);
  Job job{{in, out}, [=] {
            fake_device_copy_now(in->host.data(), send, bytes);
            MPI_Iallreduce(in->host.data(), out->host.data(), int(count), MPI_INT64_T,
                           op == ncclSum ? MPI_SUM : MPI_MAX, comm->mpi, &out->request);
          }};
  return comm->start(stream, job);
}

ncclResult_t ncclGroupStart() {
  ++groupDepth;
  return ncclSuccess;
}
ncclResult_t ncclSend(const void *buffer, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  Alone alone(comm, "ncclSend");
  const size_t bytes = count * typeBytes(type);
  if (groupDepth == 0 || !fake_device_holds(buffer, bytes))
    return ncclInvalidArgument; // the runtime always groups its sends
  grouped.push_back({true, const_cast<void *>(buffer), bytes, peer, comm, stream});
  return ncclSuccess;
}
ncclResult_t ncclRecv(void *buffer, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  Alone alone(comm, "ncclRecv");
  const size_t bytes = count * typeBytes(type);
  if (groupDepth == 0 || !fake_device_holds(buffer, bytes))
    return ncclInvalidArgument;
  grouped.push_back({false, buffer, bytes, peer, comm, stream});
  return ncclSuccess;
}
/// Posts the group's transfers (the runtime groups calls on one
/// communicator only).
ncclResult_t ncclGroupEnd() {
  if (groupDepth <= 0)
    return ncclInvalidUsage;
  if (--groupDepth > 0)
    return ncclSuccess;
  std::vector<PointToPoint> calls;
  calls.swap(grouped);
  if (calls.empty())
    return ncclSuccess;
  ncclComm_t comm = calls.front().comm;
  Alone alone(comm, "ncclGroupEnd");
  for (const PointToPoint &p : calls) {
    if (p.comm != comm || p.stream != calls.front().stream)
      return ncclInvalidUsage;
  }
  Job job;
  for (const PointToPoint &p : calls)
    job.transfers.push_back(transfer(p.bytes, p.send ? nullptr : p.buffer));
  job.post = [calls, transfers = job.transfers, comm] {
    for (size_t i = 0; i < calls.size(); ++i) {
      const PointToPoint &p = calls[i];
      Transfer &t = *transfers[i];
      if (p.send) {
        fake_device_copy_now(t.host.data(), p.buffer, p.bytes);
        MPI_Isend(t.host.data(), int(p.bytes), MPI_BYTE, p.peer, 0, comm->mpi, &t.request);
      } else {
        MPI_Irecv(t.host.data(), int(p.bytes), MPI_BYTE, p.peer, 0, comm->mpi, &t.request);
      }
    }
  };
  return comm->start(calls.front().stream, job);
}
} // extern "C"
