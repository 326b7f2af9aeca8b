//===- TensorParallel.cpp - gathers within tensor-parallel groups ---------===//
#include "TensorParallel.h"
#include "Message.h"
#include "PlanCheck.h"

#include <algorithm>
#include <cstring>
#include <sstream>

using namespace moert;

void moert::tpShare(int64_t tokens, int64_t tp, int64_t index, int64_t &first,
                    int64_t &count) {
  int64_t share = (tokens + tp - 1) / tp;
  first = std::min(index * share, tokens);
  count = std::min(share, tokens - first);
}

Status moert::tpGather(Collectives &coll, const uint8_t *slice,
                       int64_t sliceRows, int64_t rowBytes, int64_t tokens,
                       int64_t tp, uint8_t *out) {
  const int ranks = coll.size(), rank = coll.rank();
  // Local checks first; any failure fails the whole group's ranks (and the
  // others) together at the first collective.
  MessageStream problem;
  int64_t first = 0, count = 0, sendBytes = 0, outBytes = 0;
  if (tp <= 0 || tp > ranks || ranks % tp != 0)
    problem << "tp gather: tp = " << tp << " does not divide the " << ranks << " ranks";
  else if (tokens < 0 || tokens > limits::kMaxTokens)
    problem << "tp gather: tokens = " << tokens << " is outside [0, 2^31]";
  else if (rowBytes < 0 || rowBytes > limits::kMaxWorkspaceBytes)
    problem << "tp gather: rows of " << rowBytes << " bytes";
  else {
    tpShare(tokens, tp, rank % tp, first, count);
    if (sliceRows != count)
      problem << "tp gather: rank " << rank << " computed " << sliceRows
              << " rows but its share is " << count;
    else if (!checkedMul(count, rowBytes, sendBytes) ||
             !checkedMul(sendBytes, tp, sendBytes) ||
             !checkedMul(tokens, rowBytes, outBytes) ||
             sendBytes > limits::kMaxWorkspaceBytes ||
             outBytes > limits::kMaxWorkspaceBytes)
      problem << "tp gather: " << tokens << " rows of " << rowBytes
              << " bytes are over the runtime's limit of 2^40 bytes";
    else if ((count && rowBytes && !slice) || (outBytes && !out))
      problem << "tp gather: a null buffer";
  }
  if (problem.tellp())
    return coll.failTogether("tp.tokens", problem.str());

  // The group must agree on its tokens; everyone checks every group.
  std::vector<int64_t> all(ranks);
  if (Status e = coll.allGather("tp.tokens", &tokens, sizeof(int64_t), all.data()))
    return e;
  for (int r = 0; r < ranks; ++r)
    if (all[r] != all[r - r % tp]) {
      MessageStream os;
      os << "tp gather: ranks " << r - r % tp << " and " << r
         << " of one tensor-parallel group hold " << all[r - r % tp] << " and "
         << all[r] << " tokens";
      return os.str();
    }

  const int64_t group = rank - rank % tp;
  std::vector<int64_t> sendSizes(ranks, 0), recvSizes(ranks, 0);
  std::vector<uint8_t> send;
  try {
    send.resize(size_t(sendBytes));
  } catch (const std::exception &e) {
    return coll.failTogether("tp.gather",
                             std::string("tp gather: out of memory (") + e.what() + ")");
  }
  for (int64_t j = 0; j < tp; ++j) {
    sendSizes[group + j] = count * rowBytes;
    if (count)
      std::memcpy(send.data() + j * count * rowBytes, slice, count * rowBytes);
    int64_t peerFirst, peerCount;
    tpShare(tokens, tp, j, peerFirst, peerCount);
    recvSizes[group + j] = peerCount * rowBytes;
  }
  coll.counters().noteBuffer("tp.gather", int64_t(send.size()));
  // Shares arrive in TP index order, which is row order.
  return coll.allToAllV("tp.gather", send.data(), sendSizes.data(), out,
                        recvSizes.data());
}
