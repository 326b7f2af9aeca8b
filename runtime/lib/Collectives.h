//===- Collectives.h - checked, timed, counted collectives ------*- C++ -*-===//
#ifndef MOERT_LIB_COLLECTIVES_H
#define MOERT_LIB_COLLECTIVES_H

#include "Communicator.h"
#include "Counters.h"

#include <functional>
#include <memory>

namespace moert {

/// Wraps a communicator so that every collective (1) first checks that all
/// ranks are at the same collective, by sequence number, name and element
/// count, (2) finishes within the timeout, and (3) is counted. Errors name
/// the collective and the ranks involved.
class Collectives {
public:
  /// True when MOERT_INJECT_SKIP names this rank and collective (tests).
  bool injectedSkip(const char *name) const;
  Collectives(std::unique_ptr<Communicator> comm,
              std::chrono::milliseconds timeout);

  int rank() const { return comm->rank(); }
  int size() const { return comm->size(); }
  const char *backend() const { return comm->backend(); }
  Counters &counters() { return measured; }
  std::chrono::milliseconds timeout() const { return limit; }

  Status allToAllV(const char *name, const void *send, const int64_t *sendBytes,
                   void *recv, const int64_t *recvBytes);
  Status allReduce(const char *name, int64_t *values, int64_t count,
                   ReduceOp op);
  Status allGather(const char *name, const void *send, int64_t bytes,
                   void *recv);
  Status barrier(const char *name);

  /// Joins the next collective only to report `problem`: every rank, at
  /// whichever collective it is, fails with this rank's message. Use for a
  /// precondition that fails on some ranks, so none of them hangs.
  Status failTogether(const char *name, const std::string &problem);

  /// While a scope lives, every collective's descriptor carries `signature`
  /// (the calling entry's layer), and ranks that carry different values of
  /// a field fail together naming it.
  class SignatureScope {
  public:
    SignatureScope(Collectives &c, const CallSignature &s) : c(c), saved(c.signature) {
      c.signature = s;
    }
    ~SignatureScope() { c.signature = saved; }
    SignatureScope(const SignatureScope &) = delete;
    SignatureScope &operator=(const SignatureScope &) = delete;

  private:
    Collectives &c;
    CallSignature saved;
  };

  /// While a scope lives, collectives of device buffers are ordered on the
  /// layer's `stream` (after the copies enqueued there, and before the
  /// layer's next kernels) instead of the backend's own stream, and return
  /// once enqueued; `wait` waits for them within the timeout.
  class StreamScope {
  public:
    StreamScope(Collectives &c, void *stream, const char *name) : c(c), name(name) {
      c.comm->useStream(stream);
    }
    ~StreamScope() { c.comm->useStream(nullptr); }
    StreamScope(const StreamScope &) = delete;
    StreamScope &operator=(const StreamScope &) = delete;
    Status wait() {
      const std::string collective = "collective '" + std::string(name) + "'";
      if (Status e = c.comm->waitForStream(Clock::now() + c.limit, collective))
        return collective + ": " + *e;
      return std::nullopt;
    }

  private:
    Collectives &c;
    const char *name;
  };

  /// Whether checkOnStream can check device bytes without a host wait.
  bool checksOnStream() const { return comm->checksOnStream(); }
  /// Within a StreamScope: `check` runs on host copies of `spans` once the
  /// layer's stream passes this point (Communicator::checkOnStream); a
  /// problem ends the process naming collective `name`.
  Status checkOnStream(const char *name, const std::vector<Communicator::DeviceSpan> &spans,
                       Communicator::SpanCheck check) {
    return comm->checkOnStream(spans, std::move(check), Clock::now() + limit,
                               "collective '" + std::string(name) + "'");
  }

  /// "dispatch.counts"-style names fit the descriptor: 1 to 47 characters.
  static Status checkName(const char *name);

private:
  /// A collective small enough to travel inside the descriptor exchange
  /// (when the backend carriesData): `fill` writes what rank p gets into
  /// the descriptor for p, or returns false when this rank's sizes do not
  /// fit; `finish` completes the collective from the descriptors received,
  /// once the ranks agreed and every rank's bytes fit. Otherwise the data
  /// collective runs after the agreement, as for any collective.
  struct Carry {
    std::function<bool(int peer, CollectiveDescriptor &)> fill;
    std::function<Status(const std::vector<CollectiveDescriptor> &)> finish;
  };
  /// The agreement step; returns the deadline for the collective itself.
  /// With `carry`, also the descriptors received and whether every rank
  /// carried its bytes in them (`carried`: no data collective is needed).
  Status agree(const char *name, int64_t elements,
               Clock::time_point &deadline, const std::string &problem = "",
               const Carry *carry = nullptr,
               std::vector<CollectiveDescriptor> *received = nullptr,
               bool *carried = nullptr);
  /// Skip check, agreement, the call itself within the deadline, counting.
  /// A non-empty `problem` (a size this rank cannot send) fails every rank
  /// at the agreement instead. With `carry`, a collective that fits travels
  /// with the agreement and `call` does not run.
  Status run(const char *name, int64_t elements, int64_t sent, int64_t received,
             const std::function<Status(Clock::time_point)> &call,
             const std::string &problem = "", const Carry *carry = nullptr);
  /// Most bytes one rank moves in one collective: the backend's limit, at
  /// most the runtime's (limits::kMaxWorkspaceBytes).
  int64_t mostBytes() const;
  void count(const char *name, int64_t sent, int64_t received,
             Clock::time_point start, Clock::time_point agreed);

  std::unique_ptr<Communicator> comm;
  std::chrono::milliseconds limit;
  uint64_t sequence = 0;
  CallSignature signature;
  Counters measured;
  std::string skipRule;
};

} // namespace moert

#endif // MOERT_LIB_COLLECTIVES_H
