//===- Counters.h - bytes, times and buffer high-water marks ----*- C++ -*-===//
#ifndef MOERT_LIB_COUNTERS_H
#define MOERT_LIB_COUNTERS_H

#include <chrono>
#include <cstdint>
#include <ctime>
#include <map>
#include <string>

namespace moert {

struct CollectiveCounter {
  int64_t calls = 0;
  int64_t bytesSent = 0;     ///< To other ranks and to itself.
  int64_t bytesReceived = 0;
  double seconds = 0;
  /// Of `seconds`, the time until every peer's descriptor had arrived: on
  /// the rank that comes last a message latency, on the others the wait for
  /// slower peers (their compute, their share of a core).
  double waitSeconds = 0;
};

/// What one rank measured since the last reset.
/// CPU time of the process so far (every thread), in nanoseconds.
inline int64_t processCpuNs() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

struct Counters {
  std::map<std::string, CollectiveCounter> collectives;
  std::map<std::string, double> phaseSeconds;
  std::map<std::string, int64_t> highWaterBytes;
  /// The size each runtime workspace was planned with (the largest plan
  /// seen); requests are checked against it before anything is written.
  std::map<std::string, int64_t> plannedBytes;
  std::map<std::string, int64_t> totals; ///< e.g. rows dispatched.
  /// The layer's compute on this rank: the time from the end of each
  /// ep_dispatch to the start of its ep_combine, summed, and how many such
  /// intervals were counted.
  /// computeCpuNs: the CPU time the process (all its threads) spent in
  /// those intervals, which shows a rank's share of the work also when ranks
  /// share cores.
  int64_t computeNs = 0, computeCpuNs = 0, computeCalls = 0;

  void noteCompute(std::chrono::steady_clock::duration interval, int64_t cpuNs) {
    computeNs += std::chrono::duration_cast<std::chrono::nanoseconds>(interval).count();
    computeCpuNs += cpuNs;
    computeCalls += 1;
  }

  void noteBuffer(const std::string &name, int64_t bytes) {
    int64_t &mark = highWaterBytes[name];
    if (bytes > mark)
      mark = bytes;
  }
  void notePlan(const std::string &name, int64_t bytes) {
    int64_t &plan = plannedBytes[name];
    if (bytes > plan)
      plan = bytes;
  }
  void reset() { *this = Counters(); }
  /// One JSON object; `rank` and `backend` label it.
  std::string toJson(int rank, int size, const char *backend) const;
};

/// Adds the seconds of its lifetime to `counters.phaseSeconds[phase]`.
struct PhaseTimer {
  Counters &counters;
  const char *phase;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~PhaseTimer() {
    counters.phaseSeconds[phase] +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

} // namespace moert

#endif // MOERT_LIB_COUNTERS_H
