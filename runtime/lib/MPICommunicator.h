//===- MPICommunicator.h - collectives over MPI -----------------*- C++ -*-===//
#ifndef MOERT_LIB_MPICOMMUNICATOR_H
#define MOERT_LIB_MPICOMMUNICATOR_H

#include "Communicator.h"

#include <memory>

namespace moert {
/// Creates the MPI backend over MPI_COMM_WORLD (initializing MPI if needed).
std::unique_ptr<Communicator> createMPICommunicator(Status &error);

/// Ends every process of the MPI job (MPI_Abort) when MPI is initialized
/// and not finalized; returns otherwise. For fatal errors: a peer that left
/// through MPI_Finalize while this rank exits without it can leave mpirun
/// hanging (open-mpi/ompi#3380), MPI_Abort makes the launcher end the job.
void abortMPIJob();
} // namespace moert

#endif // MOERT_LIB_MPICOMMUNICATOR_H
