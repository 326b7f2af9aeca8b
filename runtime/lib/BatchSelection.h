//===- BatchSelection.h - replicas chosen per batch -------------*- C++ -*-===//
#ifndef MOERT_LIB_BATCHSELECTION_H
#define MOERT_LIB_BATCHSELECTION_H

#include "Placement.h"

#include <cstdint>
#include <vector>

namespace moert {

/// How many of this batch's choices of each expert every slot takes, so
/// that the most loaded rank gets as few choices as any split can give it:
/// experts with one slot are fixed loads; the choices of replicated experts
/// are split by an integer max flow (source -> expert, capacity its
/// choices; expert -> each rank holding one of its slots; rank -> sink,
/// capacity peak - the rank's fixed load), the peak found by bisection.
/// Integer capacities give an integer flow, so the peak is the least whole
/// number of choices: the fractional optimum rounded up. A rank holding two
/// slots of one expert gives its share to the first. Deterministic: every
/// rank computes the same result from the same counts.
struct BatchSelection {
  std::vector<int64_t> slotChoices; ///< per slot
  int64_t peak = 0;                 ///< most choices on one rank
};
BatchSelection selectReplicas(const Placement &placement,
                              const std::vector<int64_t> &expertChoices, int ranks);

/// Routes this rank's choices to slots: the n-th choice (token, choice
/// order) of expert e here is choice `before[e] + n` of e over all ranks,
/// and the e's slots take its choices in slot order, `slotChoices` each.
class SlotCursor {
public:
  SlotCursor(const Placement &placement, const BatchSelection &selection,
             const std::vector<int64_t> &before);
  int32_t next(int32_t expert);

private:
  const Placement &placement;
  const BatchSelection &selection;
  std::vector<size_t> replica;  ///< per expert: index into slotsOf
  std::vector<int64_t> left;    ///< choices left in that replica
};

} // namespace moert

#endif // MOERT_LIB_BATCHSELECTION_H
