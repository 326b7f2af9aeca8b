//===- AllGatherExchange.cpp - the decode layout's exchange by all-gather -===//
#include "AllGatherExchange.h"
#include "Message.h"

#include <vector>

using namespace moert;

Status moert::gatherProblem(const GatherInput &in, int ranks) {
  if (in.expertRank && in.experts % ranks != 0) {
    MessageStream os;
    os << "dispatch: a layer that maps global ids (the all-gather dispatch, or one packed by the "
          "layer) needs the "
       << in.experts << " experts in equal blocks by rank, which " << ranks
       << " ranks do not divide";
    return os.str();
  }
  const int64_t local = in.experts / ranks;
  for (int64_t e = 0; in.expertRank && e < in.experts; ++e)
    if (in.expertRank[e] != e / local) {
      MessageStream os;
      os << "dispatch: expert_rank[" << e << "] = " << in.expertRank[e]
         << ", but a layer that maps global ids needs rank r to own experts [r*" << local
         << ", (r+1)*" << local << ") (expected " << e / local << ")";
      return os.str();
    }
  for (int64_t i = 0; i < in.tokens * in.topK; ++i)
    if (in.expertIds[i] < -1 || in.expertIds[i] >= in.experts) {
      MessageStream os;
      os << "dispatch: expert_ids[" << i / in.topK << "," << i % in.topK
         << "] = " << in.expertIds[i] << " is not an expert of the " << in.experts << " (ids 0 to "
         << in.experts - 1 << ", or -1 for none)";
      return os.str();
    }
  return std::nullopt;
}

Status GatherCheck::problem(const std::vector<const void *> &host, Placement &placement) const {
  GatherInput in;
  in.tokens = tokens;
  in.topK = topK;
  in.expertIds = static_cast<const int32_t *>(host[0]);
  in.experts = mapSize;
  const auto *map = static_cast<const int32_t *>(host[1]);
  if (placed) {
    const auto *share = static_cast<const float *>(host.size() > 2 ? host[2] : nullptr);
    if (Status e = Placement::fromReplicas(map, share, mapSize, ranks, experts, placement))
      return e;
    in.experts = placement.experts();
  } else {
    in.expertRank = map;
  }
  return gatherProblem(in, ranks);
}

Status moert::returnBlocks(Collectives &c, const void *partial, int64_t blockBytes, void *recv) {
  std::vector<int64_t> bytes(size_t(c.size()), blockBytes);
  return c.allToAllV("combine.payload", partial, bytes.data(), recv, bytes.data());
}
