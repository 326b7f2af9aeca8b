//===- NCCLWatchdog.cpp - timeouts for collectives the host does not wait for -===//
#include "NCCLWatchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>

using namespace moert;

NCCLWatchdog::NCCLWatchdog(int device, int rank, ncclComm_t comm, std::mutex &ncclCalls,
                           bool captureUnwatched)
    : device(device), rank(rank), captureUnwatched(captureUnwatched), comm(comm),
      ncclCalls(ncclCalls), thread([this] { run(); }) {}

void NCCLWatchdog::forgetCommunicator() {
  std::lock_guard<std::mutex> lock(mutex);
  comm = nullptr;
}

NCCLWatchdog::~NCCLWatchdog() {
  {
    std::unique_lock<std::mutex> lock(mutex);
    drained.wait(lock, [this] { return watched.empty(); });
    stopping = true;
  }
  wake.notify_all();
  thread.join();
  for (cudaEvent_t event : spare)
    cudaEventDestroy(event);
  for (Pinned &p : freePinned)
    cudaFreeHost(p.data);
}

Status NCCLWatchdog::takePinned(int64_t bytes, Pinned &out) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (size_t i = 0; i < freePinned.size(); ++i)
      if (freePinned[i].bytes >= bytes) {
        out = freePinned[i];
        freePinned.erase(freePinned.begin() + long(i));
        return std::nullopt;
      }
  }
  // A new buffer (the pool grows to the checks in flight at once, and to
  // their largest size).
  out.bytes = std::max<int64_t>(bytes, 4096);
  if (cudaError_t rc = cudaMallocHost(reinterpret_cast<void **>(&out.data), size_t(out.bytes)))
    return std::string("cudaMallocHost of a check's copies failed: ") + cudaGetErrorString(rc);
  return std::nullopt;
}

Status NCCLWatchdog::watch(cudaStream_t stream, Clock::time_point deadline, std::string what,
                           const std::vector<Communicator::DeviceSpan> &spans,
                           Communicator::SpanCheck check) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaError_t rc = cudaStreamIsCapturing(stream, &capture))
    return std::string("cudaStreamIsCapturing failed: ") + cudaGetErrorString(rc);
  if (capture != cudaStreamCaptureStatusNone) {
    if (captureUnwatched)
      return std::nullopt;
    return std::string("the layer's stream is being captured into a CUDA graph, whose "
                       "collectives the nccl backend's watchdog cannot follow on replay "
                       "($MOERT_NCCL_CAPTURE=1 captures them without a timeout or checks of "
                       "the ids)");
  }
  Watched item{nullptr, deadline, std::move(what), std::move(check), {}, {}};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!spare.empty()) {
      item.event = spare.back();
      spare.pop_back();
    }
  }
  if (!item.event)
    if (cudaError_t rc = cudaEventCreateWithFlags(&item.event, cudaEventDisableTiming))
      return std::string("cudaEventCreateWithFlags failed: ") + cudaGetErrorString(rc);
  Status problem;
  if (item.check)
    problem = copyForCheck(stream, spans, item);
  if (!problem)
    if (cudaError_t rc = cudaEventRecord(item.event, stream))
      problem = std::string("cudaEventRecord failed: ") + cudaGetErrorString(rc);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (problem) {
      // Not the pinned memory: a copy enqueued into it may still land.
      spare.push_back(item.event);
      return problem;
    }
    watched.push_back(std::move(item));
  }
  wake.notify_all();
  return std::nullopt;
}

Status NCCLWatchdog::copyForCheck(cudaStream_t stream,
                                  const std::vector<Communicator::DeviceSpan> &spans,
                                  Watched &item) {
  const auto padded = [](int64_t bytes) { return (bytes + 15) / 16 * 16; };
  int64_t total = 0;
  for (const Communicator::DeviceSpan &span : spans)
    total += padded(span.bytes);
  if (Status s = takePinned(total, item.pinned))
    return s;
  int64_t at = 0;
  for (const Communicator::DeviceSpan &span : spans) {
    item.copies.push_back(item.pinned.data + at);
    if (span.bytes > 0)
      if (cudaError_t rc = cudaMemcpyAsync(item.pinned.data + at, span.data, size_t(span.bytes),
                                           cudaMemcpyDeviceToHost, stream))
        return std::string("cudaMemcpyAsync of a check's bytes failed: ") + cudaGetErrorString(rc);
    at += padded(span.bytes);
  }
  return std::nullopt;
}

void NCCLWatchdog::run() {
  cudaSetDevice(device);
  cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&relaxed);
  auto pause = std::chrono::microseconds(20);
  std::unique_lock<std::mutex> lock(mutex);
  while (!stopping) {
    if (watched.empty()) {
      drained.notify_all();
      wake.wait(lock, [this] { return stopping || !watched.empty(); });
      pause = std::chrono::microseconds(20);
      continue;
    }
    // The events complete in order per stream, and deadlines grow with
    // the order they were watched in: the first one decides.
    const Watched &first = watched.front();
    const cudaError_t state = cudaEventQuery(first.event);
    if (state == cudaSuccess) {
      if (first.check) {
        Status problem;
        try {
          problem = first.check(first.copies);
        } catch (const std::exception &e) {
          problem = std::string("the check failed: ") + e.what();
        }
        if (problem)
          failAndExit(first.what + ": " + *problem);
      }
      spare.push_back(first.event);
      if (first.pinned.data)
        freePinned.push_back(first.pinned);
      watched.pop_front();
      pause = std::chrono::microseconds(20);
      continue;
    }
    if (state == cudaErrorCudartUnloading) {
      // The process is exiting (a communicator destroyed by a static
      // destructor after cudart's): there is nothing left to wait for.
      watched.clear();
      continue;
    }
    if (state != cudaErrorNotReady)
      failAndExit(first.what + ": the layer's stream failed on GPU " + std::to_string(device) +
                  ": " + cudaGetErrorName(state) + " (" + cudaGetErrorString(state) +
                  ") (process ended)");
    if (comm) {
      std::unique_lock<std::mutex> calls(ncclCalls, std::try_to_lock);
      ncclResult_t ncclState = ncclSuccess;
      if (calls.owns_lock() && ncclCommGetAsyncError(comm, &ncclState) == ncclSuccess &&
          ncclState != ncclSuccess && ncclState != ncclInProgress) {
        // The error may have come after `first` was done: name the one it stopped.
        if (cudaEventQuery(first.event) == cudaSuccess)
          continue;
        std::string text = ncclGetErrorString(ncclState);
        if (const char *detail = ncclGetLastError(comm); detail && *detail)
          text += std::string(" (") + detail + ")";
        failAndExit(first.what + ": NCCL failed on GPU " + std::to_string(device) +
                    " while the layer's collectives ran: " + text + " (process ended)");
      }
    }
    if (Clock::now() > first.deadline)
      failAndExit(first.what + ": NCCL collectives on the layer's stream timed out on GPU " +
                  std::to_string(device) + " (process ended)");
    wake.wait_for(lock, pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

void NCCLWatchdog::failAndExit(const std::string &message) {
  std::fprintf(stderr, "moert: rank %d: error: %s\n", rank, message.c_str());
  std::fflush(stderr);
  // As the runtime's other fatal errors: the peers get time to report theirs.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::_Exit(1);
}
