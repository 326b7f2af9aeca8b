//===- NCCLCommunicator.h - collectives over NCCL ---------------*- C++ -*-===//
#ifndef MOERT_LIB_NCCLCOMMUNICATOR_H
#define MOERT_LIB_NCCLCOMMUNICATOR_H

#include "Communicator.h"

#include <memory>

namespace moert {
/// Creates the NCCL backend over all MPI ranks (initializing MPI if needed)
/// on GPU (node-local rank % visible GPUs). Data buffers passed to allToAllV
/// and allGather are DEVICE pointers; allReduce takes host values. Setup is
/// bounded by $MOERT_TIMEOUT_MS (default 30000), as moert_init's timeout is
/// not visible here.
std::unique_ptr<Communicator> createNCCLCommunicator(Status &error);
} // namespace moert

#endif // MOERT_LIB_NCCLCOMMUNICATOR_H
