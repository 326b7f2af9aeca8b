//===- Counters.cpp - counters as JSON ------------------------------------===//
#include "Counters.h"
#include "Message.h"

#include <sstream>

using namespace moert;

namespace {
template <typename Map, typename Fn>
void writeObject(MessageStream &os, const Map &map, Fn writeValue) {
  os << "{";
  bool first = true;
  for (const auto &[key, value] : map) {
    os << (first ? "" : ", ") << "\"" << key << "\": ";
    writeValue(value);
    first = false;
  }
  os << "}";
}
} // namespace

std::string Counters::toJson(int rank, int size, const char *backend) const {
  MessageStream os;
  os.precision(9);
  os << "{\"rank\": " << rank << ", \"ranks\": " << size << ", \"backend\": \""
     << backend << "\", \"collectives\": ";
  writeObject(os, collectives, [&](const CollectiveCounter &c) {
    os << "{\"calls\": " << c.calls << ", \"bytes_sent\": " << c.bytesSent
       << ", \"bytes_received\": " << c.bytesReceived
       << ", \"seconds\": " << c.seconds << ", \"wait_seconds\": " << c.waitSeconds
       << "}";
  });
  os << ", \"phase_seconds\": ";
  writeObject(os, phaseSeconds, [&](double s) { os << s; });
  os << ", \"high_water_bytes\": ";
  writeObject(os, highWaterBytes, [&](int64_t b) { os << b; });
  os << ", \"planned_bytes\": ";
  writeObject(os, plannedBytes, [&](int64_t b) { os << b; });
  os << ", \"totals\": ";
  writeObject(os, totals, [&](int64_t b) { os << b; });
  // The layer's time on this rank, split: compute (between each dispatch
  // and its combine) and the dispatch and combine entries (pack, transfers,
  // unpack, sums); transfer_share = (dispatch + combine) / all three;
  // peer_wait_ns: the part of dispatch and combine spent waiting for peers
  // to arrive at their collectives.
  auto phase = [&](const char *name) -> int64_t {
    auto it = phaseSeconds.find(name);
    return it == phaseSeconds.end() ? 0 : int64_t(it->second * 1e9);
  };
  const int64_t dispatchNs = phase("dispatch"), combineNs = phase("combine");
  const int64_t layerNs = computeNs + dispatchNs + combineNs;
  double waitSeconds = 0;
  for (const auto &[name, c] : collectives)
    if (name.rfind("dispatch.", 0) == 0 || name.rfind("combine.", 0) == 0)
      waitSeconds += c.waitSeconds;
  const int64_t waitNs = int64_t(waitSeconds * 1e9);
  os << ", \"compute_ns\": " << computeNs << ", \"compute_cpu_ns\": " << computeCpuNs
     << ", \"compute_calls\": " << computeCalls
     << ", \"layer\": {\"compute_ns\": " << computeNs << ", \"dispatch_ns\": " << dispatchNs
     << ", \"combine_ns\": " << combineNs << ", \"peer_wait_ns\": " << waitNs
     << ", \"transfer_share\": "
     << (layerNs > 0 ? double(dispatchNs + combineNs) / double(layerNs) : 0.0)
     << ", \"transfer_share_without_wait\": "
     << (layerNs > 0 ? double(dispatchNs + combineNs - waitNs) / double(layerNs) : 0.0)
     << "}";
  os << "}";
  return os.str();
}
