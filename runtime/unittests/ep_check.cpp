//===- ep_check.cpp - dispatch and combine across MPI ranks ---------------===//
//
// Run under mpirun. Each rank builds its tokens and routing from a formula
// every rank can evaluate, dispatches through the runtime, lets "expert e"
// compute (e + 1) * x on the received rows, combines, and checks its output
// against the formula. Scenarios: uniform, one-rank (every token goes to the
// last rank's experts), empty-rank (rank 0 has no tokens).
//
//===----------------------------------------------------------------------===//
#include "moert/moert.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {
constexpr int64_t kExperts = 12, kTopK = 3, kHidden = 5;

int64_t tokensOn(int rank, const std::string &scenario) {
  if (scenario == "empty-rank" && rank == 0)
    return 0;
  return 4 + 3 * rank;
}

/// Expert ids of token t on `rank`: kTopK distinct experts.
void route(int rank, int64_t t, int ranks, const std::string &scenario,
           int32_t *ids, float *weights) {
  int64_t perRank = kExperts / ranks;
  for (int64_t j = 0; j < kTopK; ++j) {
    int64_t e = scenario == "one-rank"
                    ? (ranks - 1) * perRank + (t + j) % perRank
                    : (7 * t + 5 * rank + 4 * j) % kExperts;
    ids[j] = int32_t(e);
    weights[j] = 0.25f + 0.125f * float(j);
  }
  if (scenario == "one-rank" && perRank < kTopK) // fewer experts than picks
    for (int64_t j = 0; j < kTopK; ++j)
      ids[j] = int32_t((ranks - 1) * perRank + j % perRank);
}

int fail(int rank, const std::string &what) {
  std::fprintf(stderr, "rank %d: FAIL: %s\n", rank, what.c_str());
  return 1;
}
} // namespace

int main(int argc, char **argv) {
  std::string scenario = argc > 1 ? argv[1] : "uniform";
  if (moert_init("mpi", 0) != 0) {
    std::fprintf(stderr, "moert_init: %s\n", moert_last_error());
    return 1;
  }
  int rank = moert_rank(), ranks = moert_size();
  int64_t tokens = tokensOn(rank, scenario);
  std::vector<float> x(tokens * kHidden), weights(tokens * kTopK);
  std::vector<int32_t> ids(tokens * kTopK), expertRank(kExperts);
  for (int64_t e = 0; e < kExperts; ++e)
    expertRank[e] = int32_t(e / (kExperts / ranks));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < kHidden; ++h)
      x[t * kHidden + h] = float(rank + 1) + 0.5f * float(t) - 0.25f * float(h);
    route(rank, t, ranks, scenario, &ids[t * kTopK], &weights[t * kTopK]);
  }

  auto memref2 = [](void *p, int64_t rows, int64_t cols) {
    moert_memref2d m{p, p, 0, {rows, cols}, {cols, 1}};
    return m;
  };
  moert_memref2d xm = memref2(x.data(), tokens, kHidden);
  moert_memref2d im = memref2(ids.data(), tokens, kTopK);
  moert_memref2d wm = memref2(weights.data(), tokens, kTopK);
  moert_memref1d rm{expertRank.data(), expertRank.data(), 0, {kExperts}, {1}};
  int64_t capacity = 0;
  for (int r = 0; r < ranks; ++r)
    capacity += tokensOn(r, scenario);
  moert_dispatch_result d;
  _mlir_ciface_moert_ep_dispatch_f32(&d, &xm, &im, &wm, &rm, capacity);

  int64_t rows = d.x.sizes[0];
  int64_t firstLocal = rank * (kExperts / ranks);
  std::vector<float> partial(rows * kHidden, 0.0f);
  const float *rx = static_cast<const float *>(d.x.aligned);
  const int32_t *rid = static_cast<const int32_t *>(d.local_ids.aligned);
  const float *rw = static_cast<const float *>(d.weights.aligned);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < kTopK; ++j) {
      if (rid[r * kTopK + j] < 0)
        continue;
      float scale = rw[r * kTopK + j] * float(firstLocal + rid[r * kTopK + j] + 1);
      for (int64_t h = 0; h < kHidden; ++h)
        partial[r * kHidden + h] += scale * rx[r * kHidden + h];
    }
  moert_memref2d pm = memref2(partial.data(), rows, kHidden);
  moert_memref2d y;
  _mlir_ciface_moert_ep_combine_f32(&y, &pm, d.handle);

  if (y.sizes[0] != tokens || y.sizes[1] != kHidden)
    return fail(rank, "combine returned the wrong shape");
  const float *yv = static_cast<const float *>(y.aligned);
  int64_t distinctPairs = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    float scale = 0;
    std::vector<bool> seen(ranks, false);
    for (int64_t j = 0; j < kTopK; ++j) {
      scale += weights[t * kTopK + j] * float(ids[t * kTopK + j] + 1);
      seen[expertRank[ids[t * kTopK + j]]] = true;
    }
    for (bool s : seen)
      distinctPairs += s;
    for (int64_t h = 0; h < kHidden; ++h) {
      float expect = scale * x[t * kHidden + h];
      if (std::fabs(yv[t * kHidden + h] - expect) > 1e-5f * std::fabs(expect) + 1e-6f)
        return fail(rank, "y[" + std::to_string(t) + "," + std::to_string(h) + "] = " +
                              std::to_string(yv[t * kHidden + h]) + ", expected " +
                              std::to_string(expect));
    }
  }
  char json[8192];
  moert_counters_json(json, sizeof(json));
  std::string expected = "\"dispatch_rows_sent\": " + std::to_string(distinctPairs);
  if (tokens && std::string(json).find(expected) == std::string::npos)
    return fail(rank, "counters do not show " + expected + ": " + json);
  std::free(d.x.allocated);
  std::free(d.local_ids.allocated);
  std::free(d.weights.allocated);
  std::free(y.allocated);
  std::printf("rank %d/%d %s: %ld tokens, %ld rows received: ok\n", rank, ranks,
              scenario.c_str(), long(tokens), long(rows));
  moert_finalize();
  return 0;
}
