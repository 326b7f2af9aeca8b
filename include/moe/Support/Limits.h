//===- Limits.h - Sizes the compiler and its tools accept -------*- C++ -*-===//
//
// Every reader of sizes (configs, IR, traces, command lines) checks them
// against these limits before it allocates or multiplies, so that products
// of sizes stay far inside int64_t and a bad input is an error, not an
// overflow. docs/Limits.md states them for users.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_SUPPORT_LIMITS_H
#define MOE_SUPPORT_LIMITS_H

#include <cstdint>

namespace mlir::moe::limits {

/// Logical experts of a layer, and physical expert slots of a placement.
constexpr int64_t kMaxExperts = int64_t(1) << 20;
/// Hidden size and (shared) expert intermediate size.
constexpr int64_t kMaxHidden = int64_t(1) << 20;
constexpr int64_t kMaxIntermediate = int64_t(1) << 20;
/// Routed experts per token (top-k) and expert groups.
constexpr int64_t kMaxTopK = 1024;
/// Tokens one rank holds in one call (also the decode maximum).
constexpr int64_t kMaxTokens = int64_t(1) << 31;
/// Expert-parallel and tensor-parallel ranks.
constexpr int64_t kMaxRanks = int64_t(1) << 16;
/// Layers and windows of a load trace.
constexpr int64_t kMaxLayers = int64_t(1) << 16;
/// Nesting depth of any JSON input (configs, traces, placements).
constexpr int kMaxJSONDepth = 64;

} // namespace mlir::moe::limits

#endif // MOE_SUPPORT_LIMITS_H
