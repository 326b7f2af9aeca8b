//===- Message.h - building error messages ---------------------*- C++ -*-===//
#ifndef MOERT_LIB_MESSAGE_H
#define MOERT_LIB_MESSAGE_H

#include <sstream>

namespace moert {

/// An ostringstream that rethrows (std::bad_alloc) instead of setting
/// badbit and truncating its text when memory runs out, so that an
/// allocation failure reaches the entry point's guard and is reported as
/// such, never as a cut-off message or a silently short result.
struct MessageStream : std::ostringstream {
  MessageStream() { exceptions(std::ios::badbit); }
};

} // namespace moert

#endif // MOERT_LIB_MESSAGE_H
