//===- MPICommunicator.h - collectives over MPI -----------------*- C++ -*-===//
#ifndef MOERT_LIB_MPICOMMUNICATOR_H
#define MOERT_LIB_MPICOMMUNICATOR_H

#include "Communicator.h"

#include <memory>

namespace moert {
/// Creates the MPI backend over MPI_COMM_WORLD (initializing MPI if needed).
std::unique_ptr<Communicator> createMPICommunicator(Status &error);
} // namespace moert

#endif // MOERT_LIB_MPICOMMUNICATOR_H
