//===- NCCLWatchdog.h - timeouts for collectives the host does not wait for -*- C++ -*-===//
//
// The nccl backend enqueues a layer's collectives on the layer's stream and
// returns without waiting for them, so that the entry never synchronises
// with the host after its dispatch or combine. Their timeout is kept here
// instead, as PyTorch's ProcessGroupNCCL keeps it: an event recorded after
// them on the stream, and a thread that polls the events in order. A
// collective not done by its deadline (a rank that never joined it), or a
// stream that failed, ends the process with `moert: rank R: error: ...`, as
// the runtime ends it for compiled code on any error: by then the caller
// has returned and has no error path, and its stream would otherwise wait
// forever. Ending the process ends its kernels too, so the communicator is
// not aborted first (the calling thread may be using it).
//
// A deadline runs from when the work is enqueued, so it covers the work
// queued on the stream before it too (the host may be layers ahead); the
// events are polled in the order they were watched, the first deciding, so
// a layer should keep to one stream. While one is not done, the
// communicator's asynchronous error is polled too (ncclCommGetAsyncError):
// a collective that NCCL stopped (a peer or the network gone) ends the
// process at once, naming NCCL's error, instead of by its deadline. NCCL's
// calls on one communicator must not overlap (since 2.26
// ncclCommGetAsyncError completes and frees the group job that the
// caller's ncclGroupEnd linked), so the poll takes the communicator's call
// lock, and skips a round while the host holds it: the host's own calls
// then poll the same error.
//
// A stream being captured into a CUDA graph is refused: the events would
// belong to the graph, not to this call, and a replay runs no host code.
// With `captureUnwatched` ($MOERT_NCCL_CAPTURE=1) its collectives are
// captured as they are instead, unwatched and unchecked: a replay's
// collectives have no timeout but NCCL's own, and its ids are not checked
// (the layer keeps only ids of its own experts), as PyTorch's watchdog
// leaves captured collectives alone. The watchdog's thread queries its
// events in relaxed capture mode, so that its queries are allowed while
// another thread captures.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_LIB_NCCLWATCHDOG_H
#define MOERT_LIB_NCCLWATCHDOG_H

#include "Communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace moert {

class NCCLWatchdog {
public:
  /// `ncclCalls` is held around every other NCCL call on `comm`.
  NCCLWatchdog(int device, int rank, ncclComm_t comm, std::mutex &ncclCalls, bool captureUnwatched);
  /// Waits for what is watched (each by its deadline), then stops.
  ~NCCLWatchdog();
  NCCLWatchdog(const NCCLWatchdog &) = delete;
  NCCLWatchdog &operator=(const NCCLWatchdog &) = delete;

  /// Stops polling the communicator, which is about to be aborted.
  void forgetCommunicator();

  /// The work enqueued on `stream` so far must be done by `deadline`, or
  /// the process ends with an error naming `what`. With `spans`, their
  /// bytes are copied to the host on `stream` first and `check` runs on
  /// them once it is done; an error it returns ends the process too.
  Status watch(cudaStream_t stream, Clock::time_point deadline, std::string what,
               const std::vector<Communicator::DeviceSpan> &spans = {},
               Communicator::SpanCheck check = nullptr);

private:
  /// Pinned host memory for a check's copies (pageable memory would make
  /// the copy wait for the stream).
  struct Pinned {
    char *data = nullptr;
    int64_t bytes = 0;
  };
  struct Watched {
    cudaEvent_t event;
    Clock::time_point deadline;
    std::string what;
    Communicator::SpanCheck check; // null: none
    std::vector<const void *> copies;
    Pinned pinned;
  };
  /// Pinned memory of at least `bytes`, from those no check holds.
  Status takePinned(int64_t bytes, Pinned &out);
  /// Enqueues the copies of `spans` into `item`'s pinned memory.
  Status copyForCheck(cudaStream_t stream, const std::vector<Communicator::DeviceSpan> &spans,
                      Watched &item);
  void run();
  [[noreturn]] void failAndExit(const std::string &message);

  const int device, rank;
  const bool captureUnwatched;
  std::mutex mutex;
  ncclComm_t comm;       // null once forgotten; polled with `mutex` held
  std::mutex &ncclCalls; // taken after `mutex`, never waited for
  std::condition_variable wake, drained;
  std::deque<Watched> watched;
  std::vector<cudaEvent_t> spare; // completed events, recorded again later
  std::vector<Pinned> freePinned; // copies of checks that ran
  bool stopping = false;
  std::thread thread; // last: starts once the rest is built
};

} // namespace moert

#endif // MOERT_LIB_NCCLWATCHDOG_H
