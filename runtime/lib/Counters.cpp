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
       << ", \"seconds\": " << c.seconds << "}";
  });
  os << ", \"phase_seconds\": ";
  writeObject(os, phaseSeconds, [&](double s) { os << s; });
  os << ", \"high_water_bytes\": ";
  writeObject(os, highWaterBytes, [&](int64_t b) { os << b; });
  os << ", \"planned_bytes\": ";
  writeObject(os, plannedBytes, [&](int64_t b) { os << b; });
  os << ", \"totals\": ";
  writeObject(os, totals, [&](int64_t b) { os << b; });
  os << "}";
  return os.str();
}
