//===- AllGatherExchange.h - the decode layout's exchange by all-gather -*- C++ -*-===//
//
// The all-gather form of the decode layout (`slots = S`): every rank gets
// every rank's block of S token rows, token t of rank r at row r*S + t and
// the rows past rank r's tokens masked (x 0, ids -1, weights 0). The ids
// stay global: the compiled code maps them to this rank's experts. The
// combine sends block r of the partial rows back to rank r, which sums its
// tokens' rows in rank order in the compiled code. Every size is known
// before the call and nothing is packed per destination, so the same
// exchange runs on device buffers with NCCL.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_LIB_ALLGATHEREXCHANGE_H
#define MOERT_LIB_ALLGATHEREXCHANGE_H

#include "Collectives.h"
#include "Placement.h"

#include <cstdint>
#include <vector>

namespace moert {

/// One rank's choices of experts and the layer's map of experts to ranks.
struct GatherInput {
  int64_t tokens = 0, topK = 0;
  const int32_t *expertIds = nullptr;  ///< [tokens, topK], host memory
  const int32_t *expertRank = nullptr; ///< [experts], host memory; null: a placement
  int64_t experts = 0;
};

/// Why this rank cannot take part (every rank then fails with it), or
/// nothing: every id an expert or -1, and (without a placement) the experts
/// in equal blocks by rank (rank r owns [r*E/R, (r+1)*E/R)), which is what
/// the compiled code's map from global to local ids assumes.
Status gatherProblem(const GatherInput &in, int ranks);

/// The all-gather's checks of one rank's ids and the layer's map, on host
/// copies: at once after a host wait, or by the nccl backend's watchdog
/// once the layer's stream has passed them (Communicator::checkOnStream).
struct GatherCheck {
  int64_t tokens = 0, topK = 0;
  int64_t mapSize = 0; ///< expert_rank's length, or phys_to_log's
  int ranks = 1;
  bool placed = false;
  int64_t experts = 0; ///< the plan's expert count (0: not stated)

  /// Why this rank cannot take part, or nothing (gatherProblem, and with a
  /// placement Placement::fromReplicas): `host` holds the ids, the map and,
  /// with a placement, the shares (null: not checked); `placement` gets the
  /// placement.
  Status problem(const std::vector<const void *> &host, Placement &placement) const;
};

/// The combine's exchange: block r of `partial` (`blockBytes` each) goes to
/// rank r, and block r of `recv` comes from rank r.
Status returnBlocks(Collectives &c, const void *partial, int64_t blockBytes, void *recv);

} // namespace moert

#endif // MOERT_LIB_ALLGATHEREXCHANGE_H
