//===- MPIControl.h - MPI pieces shared by the MPI and NCCL backends -*- C++ -*-===//
//
// Both backends initialize MPI the same way and agree on collectives over the
// same MPI control channel; only their data path differs.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_LIB_MPICONTROL_H
#define MOERT_LIB_MPICONTROL_H

#include "Communicator.h"

#include <mpi.h>

namespace moert::mpi {

/// "`what` failed: <MPI's text for `code`>".
std::string errorText(const char *what, int code);

/// Initializes MPI (MPI_THREAD_SERIALIZED) unless it already is; sets
/// `initializedHere` when this call did, so the caller knows it must finalize.
Status initialize(bool &initializedHere);

/// A dup of MPI_COMM_WORLD that returns errors instead of aborting.
MPI_Comm duplicateWorld();

/// How a wait polls once it has lasted a while.
enum class LongWait {
  Yield, ///< data: keep polling, giving the core away between polls
  Rest,  ///< waiting for peers to arrive: sleep briefly between polls
};

/// Polls `requests` until all complete or `deadline` passes: a few polls
/// back to back, then a sched_yield between polls ($MOERT_WAIT_SPINS polls
/// before yielding; docs/Runtime.md). With LongWait::Rest, a wait past
/// 1 ms sleeps 50 us between polls, so that a rank waiting for a slower one
/// leaves it the core (ranks sharing cores), at a cost of at most 50 us
/// after a wait that was already 20 times longer.
Status waitAll(std::vector<MPI_Request> &requests, Clock::time_point deadline,
               const char *what, LongWait longWait = LongWait::Yield);

/// Sends `mine` to every rank of `control` and receives theirs into `all`
/// (point to point, polled against `deadline`). On timeout, `missing` lists
/// the ranks not heard from.
Status exchangeDescriptors(MPI_Comm control, const CollectiveDescriptor &mine,
                           std::vector<CollectiveDescriptor> &all,
                           std::vector<int> &missing,
                           Clock::time_point deadline);

/// The same with one descriptor per rank (toPeer[p] goes to rank p; the
/// own one is copied into all[rank]). Only the used bytes of each
/// descriptor's inline data travel.
Status exchangeDescriptors(MPI_Comm control,
                           const std::vector<CollectiveDescriptor> &toPeer,
                           std::vector<CollectiveDescriptor> &all,
                           std::vector<int> &missing,
                           Clock::time_point deadline);

} // namespace moert::mpi

#endif // MOERT_LIB_MPICONTROL_H
