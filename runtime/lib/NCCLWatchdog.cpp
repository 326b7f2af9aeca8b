//===- NCCLWatchdog.cpp - timeouts for collectives the host does not wait for -===//
#include "NCCLWatchdog.h"

#include <cstdio>

using namespace moert;

NCCLWatchdog::NCCLWatchdog(int device, int rank)
    : device(device), rank(rank), thread([this] { run(); }) {}

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
}

Status NCCLWatchdog::watch(cudaStream_t stream, Clock::time_point deadline, std::string what) {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!spare.empty()) {
      event = spare.back();
      spare.pop_back();
    }
  }
  if (!event)
    if (cudaError_t rc = cudaEventCreateWithFlags(&event, cudaEventDisableTiming))
      return std::string("cudaEventCreateWithFlags failed: ") + cudaGetErrorString(rc);
  if (cudaError_t rc = cudaEventRecord(event, stream)) {
    cudaEventDestroy(event);
    return std::string("cudaEventRecord failed: ") + cudaGetErrorString(rc);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    watched.push_back({event, deadline, std::move(what)});
  }
  wake.notify_all();
  return std::nullopt;
}

void NCCLWatchdog::run() {
  cudaSetDevice(device);
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
      spare.push_back(first.event);
      watched.pop_front();
      pause = std::chrono::microseconds(20);
      continue;
    }
    if (state != cudaErrorNotReady)
      failAndExit(first.what + ": the layer's stream failed on GPU " + std::to_string(device) +
                  ": " + cudaGetErrorName(state) + " (" + cudaGetErrorString(state) +
                  ") (process ended)");
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
