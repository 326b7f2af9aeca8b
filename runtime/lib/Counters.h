//===- Counters.h - bytes, times and buffer high-water marks ----*- C++ -*-===//
#ifndef MOERT_LIB_COUNTERS_H
#define MOERT_LIB_COUNTERS_H

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace moert {

struct CollectiveCounter {
  int64_t calls = 0;
  int64_t bytesSent = 0;     ///< To other ranks and to itself.
  int64_t bytesReceived = 0;
  double seconds = 0;
};

/// What one rank measured since the last reset.
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
  int64_t computeNs = 0, computeCalls = 0;

  void noteCompute(std::chrono::steady_clock::duration interval) {
    computeNs += std::chrono::duration_cast<std::chrono::nanoseconds>(interval).count();
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

} // namespace moert

#endif // MOERT_LIB_COUNTERS_H
