//===- Placement.h - logical experts on physical slots ----------*- C++ -*-===//
#ifndef MOERT_LIB_PLACEMENT_H
#define MOERT_LIB_PLACEMENT_H

#include "Communicator.h"

#include <cstdint>
#include <vector>

namespace moert {

/// Where each logical expert's replicas live. Slot p is on rank p / S (S
/// slots per rank) with local index p % S. The plain layout (expert_rank)
/// is a placement with one replica per expert.
class Placement {
public:
  /// From a load balancer: phys_to_log[P] and each slot's share of its
  /// expert's tokens. `experts` is the layer's logical expert count E (the
  /// plan's optional field; 0: unknown). Every phys_to_log value must be an
  /// expert in [0, E) and every expert needs a positive total share. With E
  /// unknown it is inferred as 1 + the largest value below P (E <= P, as
  /// every expert needs a slot), so that a stray value is named as such.
  /// `share` null: the shares are not read (replicas chosen per batch,
  /// BatchSelection.h); every expert then needs a slot.
  static Status fromReplicas(const int32_t *physToLog, const float *share,
                             int64_t slots, int ranks, int64_t experts,
                             Placement &out);
  /// From expert_rank[E]: experts keep their order on their rank, and every
  /// rank must own E / ranks of them.
  static Status fromExpertRank(const int32_t *expertRank, int64_t experts,
                               int ranks, Placement &out);

  int64_t experts() const { return int64_t(replicas.size()); }
  int64_t slotsPerRank() const { return perRank; }
  /// The slot that the n-th choice of `expert` on this rank goes to: the
  /// replica whose interval of cumulative shares holds frac((n + 0.5) * g),
  /// g the golden ratio's fractional part (a low-discrepancy sequence, so
  /// every prefix of choices follows the shares closely).
  int32_t choose(int32_t expert, int64_t n) const;
  /// Every slot of `expert`, in slot order (shares of 0 included).
  const std::vector<int32_t> &slotsOf(int32_t expert) const { return slots[expert]; }

private:
  struct Replica {
    int32_t slot;
    double upTo; ///< cumulative share, normalized to end at 1
  };
  std::vector<std::vector<Replica>> replicas; ///< per logical expert
  std::vector<std::vector<int32_t>> slots;    ///< per logical expert
  int64_t perRank = 0;
};

} // namespace moert

#endif // MOERT_LIB_PLACEMENT_H
