//===- Communicator.h - collectives the compiled MoE code needs -*- C++ -*-===//
#ifndef MOERT_LIB_COMMUNICATOR_H
#define MOERT_LIB_COMMUNICATOR_H

#include <chrono>
#include <climits>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace moert {

using Clock = std::chrono::steady_clock;

/// An error message, or nothing on success.
using Status = std::optional<std::string>;

enum class ReduceOp { Sum, Max };

/// What the call that issues a collective is about: the layer's signature
/// as this rank's entry point sees it (hidden size, top-k, dtype, ...).
/// Ranks that both carry a field must agree on it, so that ranks running
/// different layers fail naming the field instead of exchanging mismatched
/// bytes. Fields not set are not compared.
struct CallSignature {
  enum Field {
    Hidden,       ///< hidden size H
    TopK,         ///< top-k
    Dtype,        ///< element bytes: 4 f32, 2 bf16
    Quantization, ///< plan quantization (0 none, 1 fp8g128, 2 fp8g32ue8m0)
    Ep,           ///< the plan's ep field (0: unchecked)
    Experts,      ///< expert_rank's length, or phys_to_log's
    Entry,        ///< bit 0: placed, bit 1: FP8 codes to the experts,
                  ///< bit 2: the all-gather form
    PlanHash,     ///< FNV-1a of the plan's values
    Tp,           ///< tensor-parallel group size
    Layer,        ///< the plan's fingerprint of the compiled layer
    FieldCount
  };
  uint32_t present = 0; ///< bit f: values[f] is set
  int64_t values[FieldCount] = {};
  void set(Field f, int64_t v) {
    present |= 1u << f;
    values[f] = v;
  }
  bool has(int f) const { return present & (1u << f); }
};

/// What a rank is about to do; all ranks must agree before the collective.
struct CollectiveDescriptor {
  uint64_t sequence = 0; ///< Index of this collective on this communicator.
  char name[48] = {};    ///< e.g. "dispatch.counts".
  int64_t elements = 0;  ///< Must agree for allreduce / allgather.
  CallSignature signature; ///< The issuing call's layer (may be empty).
  /// Why this rank cannot go on (empty: it can). Every rank then fails with
  /// it instead of running the collective.
  char problem[512] = {};

  // A small collective can travel inside the descriptor exchange, so that
  // it costs one latency round instead of two (Communicator::carriesData).
  // These fields come last: a backend sends only the `inlineBytes` of
  // `data` that are used. They take no part in the agreement.
  static constexpr int64_t kInlineBytes = 512;
  /// This rank can finish the collective from the descriptors alone (its
  /// sizes fit): when every rank can, none runs the data collective.
  uint8_t carried = 0;
  int64_t inlineBytes = 0;       ///< bytes of `data` for the receiving peer
  uint8_t data[kInlineBytes] = {};
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
  /// Most bytes one rank may send (or receive) in one collective, over all
  /// peers: MPI counts and displacements are ints.
  virtual int64_t maxCollectiveBytes() const { return INT64_MAX; }

  /// Sends `mine` to every rank and receives theirs (point to point, on a
  /// control channel). On timeout, `missing` lists the ranks not heard from.
  virtual Status exchangeDescriptors(const CollectiveDescriptor &mine,
                                     std::vector<CollectiveDescriptor> &all,
                                     std::vector<int> &missing,
                                     Clock::time_point deadline) = 0;

  /// Whether exchangeCarrying works: the descriptors can carry a small
  /// collective's bytes (host memory), so that it needs no data collective.
  virtual bool carriesData() const { return false; }

  /// Like exchangeDescriptors, but rank p gets toPeer[p] (one descriptor per
  /// rank, the own one included, differing only in `inlineBytes` and
  /// `data`); all[p] is what rank p sent to this rank.
  virtual Status exchangeCarrying(const std::vector<CollectiveDescriptor> &toPeer,
                                  std::vector<CollectiveDescriptor> &all,
                                  std::vector<int> &missing,
                                  Clock::time_point deadline) {
    (void)toPeer, (void)all, (void)missing, (void)deadline;
    return std::string("this backend does not carry data in descriptors");
  }

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

  /// Orders the device-buffer collectives that follow on `stream` (a
  /// layer's CUstream) instead of the backend's own, each returning once
  /// it is enqueued; null restores the backend's stream. Only the nccl
  /// backend has streams.
  virtual void useStream(void *stream) { (void)stream; }
  /// The collectives enqueued on the layer's stream must be done by
  /// `deadline`: waits for them, or (the nccl backend's watchdog) returns
  /// at once and ends the process with an error naming `collective` if
  /// they are not done by then.
  virtual Status waitForStream(Clock::time_point deadline, const std::string &collective) {
    (void)deadline;
    (void)collective;
    return std::nullopt;
  }

  /// Device bytes a check reads, and the check of their host copies (in
  /// the order given): an error, or nothing.
  struct DeviceSpan {
    const void *data;
    int64_t bytes;
  };
  using SpanCheck = std::function<Status(const std::vector<const void *> &)>;
  /// Whether checkOnStream works (the nccl backend, unless the host waits).
  virtual bool checksOnStream() const { return false; }
  /// Copies `spans` to the host where the layer's stream (useStream) now
  /// is, and runs `check` on them once the stream has passed this point,
  /// on another thread, without a host wait: an error, or the stream not
  /// passing by `deadline`, ends the process naming `collective`. `check`
  /// must touch nothing but what it captured by value.
  virtual Status checkOnStream(const std::vector<DeviceSpan> &spans, SpanCheck check,
                               Clock::time_point deadline, const std::string &collective) {
    (void)spans, (void)check, (void)deadline, (void)collective;
    return std::string("this backend does not check device bytes on a stream");
  }
};

} // namespace moert

#endif // MOERT_LIB_COMMUNICATOR_H
