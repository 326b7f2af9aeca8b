//===- Fatal.h - ending the process for compiled code ----------*- C++ -*-===//
#ifndef MOERT_LIB_FATAL_H
#define MOERT_LIB_FATAL_H

#include <string>

namespace moert {

/// For entry points called by compiled code, which has no error path: tells
/// the other ranks (the problem rides on the next collective's descriptor,
/// `collective` naming it, so they fail with this rank's message instead of
/// waiting for the timeout), prints `moert: rank R: error: ...` and ends the
/// process with status 1.
[[noreturn]] void fatal(const char *collective, const std::string &message);

/// Where even a message cannot be built: prints `moert: rank R: error:
/// <entry>: out of memory` without allocating and ends the process.
[[noreturn]] void fatalOutOfMemory(const char *entry) noexcept;

} // namespace moert

#endif // MOERT_LIB_FATAL_H
