//===- TensorParallel.h - gathers within tensor-parallel groups -*- C++ -*-===//
#ifndef MOERT_LIB_TENSORPARALLEL_H
#define MOERT_LIB_TENSORPARALLEL_H

#include "Collectives.h"

namespace moert {

/// Rows [first, first + count) that TP index `index` of `tp` takes of
/// `tokens` rows: consecutive shares of ceil(tokens / tp).
void tpShare(int64_t tokens, int64_t tp, int64_t index, int64_t &first,
             int64_t &count);

/// All-gather within this rank's tensor-parallel group (the `tp`
/// consecutive ranks that hold the same `tokens` rows): `slice` holds this
/// rank's share (tpShare), `out` receives all `tokens` rows of `rowBytes`.
/// Fails, on every rank, if the group's ranks disagree on `tokens`.
Status tpGather(Collectives &coll, const uint8_t *slice, int64_t sliceRows,
                int64_t rowBytes, int64_t tokens, int64_t tp, uint8_t *out);

} // namespace moert

#endif // MOERT_LIB_TENSORPARALLEL_H
