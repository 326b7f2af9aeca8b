//===- selection_bench.cpp - cost of choosing replicas per batch ----------===//
//
// Times selectReplicas (BatchSelection.h), the host work of one layer's
// per-batch replica selection, on a DeepSeek-V3-sized layer: 256 experts on
// 32 ranks of 9 slots, the 32 busiest experts with a second replica on the
// rank after theirs. Batches of B tokens per rank draw 8 distinct experts
// each from Zipf-like popularities (s = 0.5, shuffled over the experts).
// Prints min and median microseconds over the batches and the batches'
// peak / mean. Not a test.
//
//   build/runtime/moert-selection-bench [--batches 200]
//
//===----------------------------------------------------------------------===//
#include "BatchSelection.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

using namespace moert;

int main(int argc, char **argv) {
  int batches = 200;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--batches"))
      batches = std::max(1, std::atoi(argv[i + 1]));
  const int experts = 256, ranks = 32, perRank = 9, topK = 8;
  std::mt19937 random(1);
  std::vector<double> popularity(experts);
  for (int e = 0; e < experts; ++e)
    popularity[e] = 1.0 / std::pow(e + 1.0, 0.5);
  std::shuffle(popularity.begin(), popularity.end(), random);
  std::vector<int> byHeat(experts);
  std::iota(byHeat.begin(), byHeat.end(), 0);
  std::sort(byHeat.begin(), byHeat.end(),
            [&](int a, int b) { return popularity[a] > popularity[b]; });

  // Expert e's first slot: rank e / 8, local e % 8; the 32 busiest get a
  // second replica in slot 8 of the rank after their own.
  std::vector<int32_t> physToLog(size_t(ranks) * perRank);
  for (int e = 0; e < experts; ++e)
    physToLog[(e / 8) * perRank + e % 8] = e;
  for (int i = 0; i < ranks; ++i) {
    int e = byHeat[i];
    physToLog[((e / 8 + 1) % ranks) * perRank + 8] = e;
  }
  Placement placement;
  if (Status e = Placement::fromReplicas(physToLog.data(), nullptr,
                                         int64_t(physToLog.size()), ranks, experts,
                                         placement)) {
    std::fprintf(stderr, "%s\n", e->c_str());
    return 1;
  }
  std::discrete_distribution<int> pick(popularity.begin(), popularity.end());
  std::printf("selectReplicas: %d experts, %d ranks x %d slots, top-%d, %d batches\n",
              experts, ranks, perRank, topK, batches);
  std::printf("%6s  %8s  %8s  %10s\n", "B", "min us", "med us", "peak/mean");
  for (int tokens : {16, 128, 1024}) {
    std::vector<double> micros;
    double ratio = 0;
    for (int b = 0; b < batches; ++b) {
      std::vector<int64_t> counts(experts, 0);
      for (int t = 0; t < tokens * ranks; ++t) {
        int chosen[topK];
        for (int j = 0; j < topK; ++j) {
          int e;
          do // distinct experts: draw again
            e = pick(random);
          while (std::find(chosen, chosen + j, e) != chosen + j);
          chosen[j] = e;
          ++counts[e];
        }
      }
      auto start = std::chrono::steady_clock::now();
      BatchSelection s = selectReplicas(placement, counts, ranks);
      micros.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
      ratio += double(s.peak) * ranks / (double(tokens) * ranks * topK) / batches;
    }
    std::sort(micros.begin(), micros.end());
    std::printf("%6d  %8.1f  %8.1f  %10.4f\n", tokens, micros.front(),
                micros[micros.size() / 2], ratio);
  }
  return 0;
}
