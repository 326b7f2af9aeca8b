//===- LocalCommunicator.cpp - the one-rank communicator ------------------===//
#include "LocalCommunicator.h"

#include <cstring>

using namespace moert;

namespace {
class LocalCommunicator final : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char *backend() const override { return "local"; }

  Status exchangeDescriptors(const CollectiveDescriptor &mine,
                             std::vector<CollectiveDescriptor> &all,
                             std::vector<int> &missing,
                             Clock::time_point) override {
    all.assign(1, mine);
    missing.clear();
    return std::nullopt;
  }
  Status allToAllV(const void *send, const int64_t *sendBytes, void *recv,
                   const int64_t *recvBytes, Clock::time_point) override {
    if (sendBytes[0] != recvBytes[0])
      return "all-to-all: rank 0 sends " + std::to_string(sendBytes[0]) +
             " bytes to itself but expects " + std::to_string(recvBytes[0]);
    if (sendBytes[0])
      std::memcpy(recv, send, sendBytes[0]);
    return std::nullopt;
  }
  Status allReduce(int64_t *, int64_t, ReduceOp, Clock::time_point) override {
    return std::nullopt;
  }
  Status allGather(const void *send, int64_t bytes, void *recv,
                   Clock::time_point) override {
    if (bytes)
      std::memcpy(recv, send, bytes);
    return std::nullopt;
  }
  Status barrier(Clock::time_point) override { return std::nullopt; }
};
} // namespace

std::unique_ptr<Communicator> moert::createLocalCommunicator() {
  return std::make_unique<LocalCommunicator>();
}
