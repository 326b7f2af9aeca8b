//===- Placement.cpp - logical experts on physical slots ------------------===//
#include "Placement.h"
#include "Message.h"

#include <algorithm>
#include <cmath>
#include <sstream>

using namespace moert;

Status Placement::fromReplicas(const int32_t *physToLog, const float *share,
                               int64_t slots, int ranks, int64_t experts,
                               Placement &out) {
  if (ranks <= 0 || slots <= 0 || slots % ranks != 0)
    return "placement: " + std::to_string(slots) + " slots do not divide over " +
           std::to_string(ranks) + " ranks";
  if (experts < 0 || experts > slots)
    return "placement: " + std::to_string(experts) + " experts cannot live in " +
           std::to_string(slots) + " slots";
  const bool inferred = experts == 0;
  if (inferred)
    for (int64_t p = 0; p < slots; ++p)
      if (physToLog[p] >= 0 && physToLog[p] < slots)
        experts = std::max<int64_t>(experts, int64_t(physToLog[p]) + 1);
  for (int64_t p = 0; p < slots; ++p) {
    if (physToLog[p] < 0 || physToLog[p] >= experts) {
      MessageStream os;
      os << "placement: phys_to_log[" << p << "] = " << physToLog[p]
         << " is not an expert of the " << experts;
      if (experts > 0)
        os << " (0 to " << experts - 1 << ")";
      if (inferred)
        os << "; the expert count is inferred from phys_to_log (the plan does not "
              "state it)";
      return os.str();
    }
    if (share && (!(share[p] >= 0.0f) || !std::isfinite(share[p]))) {
      MessageStream os;
      os << "placement: replica_share[" << p << "] = " << share[p]
         << " is not a finite share >= 0";
      return os.str();
    }
  }
  out = Placement();
  out.perRank = slots / ranks;
  out.replicas.resize(experts);
  out.slots.resize(experts);
  for (int64_t p = 0; p < slots; ++p)
    out.slots[physToLog[p]].push_back(int32_t(p));
  if (!share) {
    for (int64_t e = 0; e < experts; ++e)
      if (out.slots[e].empty())
        return "placement: expert " + std::to_string(e) + " has no slot";
    return std::nullopt;
  }
  std::vector<double> total(experts, 0.0);
  for (int64_t p = 0; p < slots; ++p)
    total[physToLog[p]] += share[p];
  for (int64_t e = 0; e < experts; ++e)
    if (!(total[e] > 0.0))
      return "placement: expert " + std::to_string(e) +
             " has no replica with a positive share";
  std::vector<double> sum(experts, 0.0);
  for (int64_t p = 0; p < slots; ++p) {
    int32_t e = physToLog[p];
    if (share[p] == 0.0f)
      continue; // never chosen
    sum[e] += share[p];
    out.replicas[e].push_back({int32_t(p), sum[e] / total[e]});
  }
  return std::nullopt;
}

Status Placement::fromExpertRank(const int32_t *expertRank, int64_t experts,
                                 int ranks, Placement &out) {
  if (ranks <= 0 || experts <= 0)
    return "dispatch: expert_rank has " + std::to_string(experts) + " entries for " +
           std::to_string(ranks) + " ranks";
  std::vector<int64_t> owned(ranks, 0);
  for (int64_t e = 0; e < experts; ++e) {
    if (expertRank[e] < 0 || expertRank[e] >= ranks) {
      MessageStream os;
      os << "dispatch: expert_rank[" << e << "] = " << expertRank[e]
         << " is not a rank in [0, " << ranks << ")";
      return os.str();
    }
    ++owned[expertRank[e]];
  }
  // Compiled layers hold experts / ranks experts each; a map that gives a
  // rank more would index past its weights.
  for (int r = 0; r < ranks; ++r)
    if (owned[r] * ranks != experts) {
      MessageStream os;
      os << "dispatch: expert_rank gives rank " << r << " " << owned[r]
         << " experts; every rank must own experts / ranks = " << experts / ranks;
      return os.str();
    }
  out = Placement();
  out.perRank = experts / ranks;
  out.replicas.resize(experts);
  std::vector<int32_t> seen(ranks, 0);
  for (int64_t e = 0; e < experts; ++e) {
    int32_t slot = int32_t(expertRank[e] * out.perRank + seen[expertRank[e]]++);
    out.replicas[e].push_back({slot, 1.0});
    out.slots.push_back({slot});
  }
  return std::nullopt;
}

int32_t Placement::choose(int32_t expert, int64_t n) const {
  const std::vector<Replica> &r = replicas[expert];
  if (r.size() == 1)
    return r.front().slot;
  const double golden = 0.6180339887498949;
  double u = std::fmod((double(n) + 0.5) * golden, 1.0);
  for (const Replica &replica : r)
    if (u < replica.upTo)
      return replica.slot;
  return r.back().slot; // u rounds to 1
}
