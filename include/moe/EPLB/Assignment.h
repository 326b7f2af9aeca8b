//===- Assignment.h - Minimum-cost perfect assignment -*- C++ -*-===//
#ifndef MOE_EPLB_ASSIGNMENT_H
#define MOE_EPLB_ASSIGNMENT_H

#include <cstdint>
#include <vector>

namespace mlir::moe::eplb {

/// Assigns each row of the square matrix `cost` a distinct column with the
/// least total cost (Hungarian method, O(n^3)); returns the column of each
/// row.
std::vector<int64_t>
minCostAssignment(const std::vector<std::vector<double>> &cost);

} // namespace mlir::moe::eplb

#endif // MOE_EPLB_ASSIGNMENT_H
