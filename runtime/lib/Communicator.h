//===- Communicator.h - collectives the compiled MoE code needs -*- C++ -*-===//
#ifndef MOERT_LIB_COMMUNICATOR_H
#define MOERT_LIB_COMMUNICATOR_H

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moert {

using Clock = std::chrono::steady_clock;

/// An error message, or nothing on success.
using Status = std::optional<std::string>;

enum class ReduceOp { Sum, Max };

/// What a rank is about to do; all ranks must agree before the collective.
struct CollectiveDescriptor {
  uint64_t sequence = 0; ///< Index of this collective on this communicator.
  char name[48] = {};    ///< e.g. "dispatch.counts".
  int64_t elements = 0;  ///< Must agree for allreduce / allgather.
  /// Why this rank cannot go on (empty: it can). Every rank then fails with
  /// it instead of running the collective.
  char problem[200] = {};
};

/// One communicator backend (MPI, NCCL, or a single local rank). Buffers are
/// host memory for MPI and local, device memory for NCCL. Every call returns
/// an error instead of blocking past `deadline`.
class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char *backend() const = 0;

  /// Sends `mine` to every rank and receives theirs (point to point, on a
  /// control channel). On timeout, `missing` lists the ranks not heard from.
  virtual Status exchangeDescriptors(const CollectiveDescriptor &mine,
                                     std::vector<CollectiveDescriptor> &all,
                                     std::vector<int> &missing,
                                     Clock::time_point deadline) = 0;

  /// Rank r sends sendBytes[p] bytes to rank p (contiguous, in rank order)
  /// and receives recvBytes[p] bytes from rank p (contiguous, in rank order).
  virtual Status allToAllV(const void *send, const int64_t *sendBytes,
                           void *recv, const int64_t *recvBytes,
                           Clock::time_point deadline) = 0;

  /// In-place reduction of `count` int64 values over all ranks.
  virtual Status allReduce(int64_t *values, int64_t count, ReduceOp op,
                           Clock::time_point deadline) = 0;

  /// Every rank contributes `bytes`; `recv` holds size() * bytes in rank order.
  virtual Status allGather(const void *send, int64_t bytes, void *recv,
                           Clock::time_point deadline) = 0;

  virtual Status barrier(Clock::time_point deadline) = 0;
};

} // namespace moert

#endif // MOERT_LIB_COMMUNICATOR_H
