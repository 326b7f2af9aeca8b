//===- TensorParallel.cpp - gathers within tensor-parallel groups ---------===//
#include "TensorParallel.h"

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
  if (tp <= 0 || ranks % tp != 0)
    return "tp gather: tp = " + std::to_string(tp) + " does not divide the " +
           std::to_string(ranks) + " ranks";
  // The group must agree on its tokens; everyone checks every group.
  std::vector<int64_t> all(ranks);
  if (Status e = coll.allGather("tp.tokens", &tokens, sizeof(int64_t), all.data()))
    return e;
  for (int r = 0; r < ranks; ++r)
    if (all[r] != all[r - r % tp]) {
      std::ostringstream os;
      os << "tp gather: ranks " << r - r % tp << " and " << r
         << " of one tensor-parallel group hold " << all[r - r % tp] << " and "
         << all[r] << " tokens";
      return os.str();
    }
  int64_t first, count;
  tpShare(tokens, tp, rank % tp, first, count);
  if (sliceRows != count)
    return "tp gather: rank " + std::to_string(rank) + " computed " +
           std::to_string(sliceRows) + " rows but its share is " +
           std::to_string(count);

  const int64_t group = rank - rank % tp;
  std::vector<int64_t> sendBytes(ranks, 0), recvBytes(ranks, 0);
  std::vector<uint8_t> send(size_t(tp * count * rowBytes));
  for (int64_t j = 0; j < tp; ++j) {
    sendBytes[group + j] = count * rowBytes;
    if (count)
      std::memcpy(send.data() + j * count * rowBytes, slice, count * rowBytes);
    int64_t peerFirst, peerCount;
    tpShare(tokens, tp, j, peerFirst, peerCount);
    recvBytes[group + j] = peerCount * rowBytes;
  }
  coll.counters().noteBuffer("tp.gather", int64_t(send.size()));
  // Shares arrive in TP index order, which is row order.
  return coll.allToAllV("tp.gather", send.data(), sendBytes.data(), out,
                        recvBytes.data());
}
