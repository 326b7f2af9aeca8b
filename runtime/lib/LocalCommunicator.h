//===- LocalCommunicator.h - the one-rank communicator ----------*- C++ -*-===//
#ifndef MOERT_LIB_LOCALCOMMUNICATOR_H
#define MOERT_LIB_LOCALCOMMUNICATOR_H

#include "Communicator.h"

#include <memory>

namespace moert {
/// A single rank: every collective is a local copy. For EP = 1 and unit tests.
std::unique_ptr<Communicator> createLocalCommunicator();
} // namespace moert

#endif // MOERT_LIB_LOCALCOMMUNICATOR_H
