//===- Assignment.cpp - Minimum-cost perfect assignment -------------------===//
#include "moe/EPLB/Assignment.h"

#include <limits>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

std::vector<int64_t>
eplb::minCostAssignment(const std::vector<std::vector<double>> &cost) {
  // Shortest augmenting paths with row and column potentials (1-based).
  int64_t n = static_cast<int64_t>(cost.size());
  double inf = std::numeric_limits<double>::infinity();
  std::vector<double> u(n + 1, 0), v(n + 1, 0);
  std::vector<int64_t> rowOf(n + 1, 0), way(n + 1, 0);
  for (int64_t i = 1; i <= n; ++i) {
    rowOf[0] = i;
    int64_t j0 = 0;
    std::vector<double> minv(n + 1, inf);
    std::vector<char> used(n + 1, 0);
    do {
      used[j0] = 1;
      int64_t i0 = rowOf[j0], j1 = 0;
      double delta = inf;
      for (int64_t j = 1; j <= n; ++j) {
        if (used[j])
          continue;
        double cur = cost[i0 - 1][j - 1] - u[i0] - v[j];
        if (cur < minv[j]) {
          minv[j] = cur;
          way[j] = j0;
        }
        if (minv[j] < delta) {
          delta = minv[j];
          j1 = j;
        }
      }
      for (int64_t j = 0; j <= n; ++j) {
        if (used[j]) {
          u[rowOf[j]] += delta;
          v[j] -= delta;
        } else {
          minv[j] -= delta;
        }
      }
      j0 = j1;
    } while (rowOf[j0] != 0);
    do {
      int64_t j1 = way[j0];
      rowOf[j0] = rowOf[j1];
      j0 = j1;
    } while (j0);
  }
  std::vector<int64_t> column(n);
  for (int64_t j = 1; j <= n; ++j)
    column[rowOf[j] - 1] = j - 1;
  return column;
}
