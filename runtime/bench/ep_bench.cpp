//===- ep_bench.cpp - throughput of dispatch and combine across MPI ranks -===//
//
// Run under mpirun (not a test):
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/runtime/moert-ep-bench \
//       [--tokens 512] [--hidden 2048] [--topk 8] [--experts 128] [--iters 20]
//       [--warmup 3] [--compute-ms 0] [--json]
//
// Each rank holds `tokens` f32 tokens routed to top-k distinct experts of
// `experts` (pseudo-random, the same on every run; experts in contiguous
// blocks per rank), dispatches them, optionally spins `compute-ms` as the
// layer's compute, and combines the received rows as they came (the partial
// is the dispatch's x). Ranks meet at a barrier before each dispatch so that
// skew does not count as transfer time. Rank 0 prints, per call and as the
// slowest rank saw it, the time of the whole entry (pack, counts, payload,
// unpack), the time of the payload collective alone, the payload bytes per
// rank and MB/s of payload per rank (bytes sent / payload time). It also
// prints the runtime's counters of the last rank 0 iteration: compute_ns
// (if the runtime reports it) and the transfer share of the layer; with
// --json, the whole counters object of that iteration.
//
//===----------------------------------------------------------------------===//
#include "moert/moert.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {
using Clock = std::chrono::steady_clock;

std::string countersJson() {
  int64_t length = moert_counters_json(nullptr, 0);
  std::string json(size_t(length + 1), '\0');
  moert_counters_json(json.data(), length + 1);
  json.resize(size_t(length));
  return json;
}

/// A number after `"key": ` in `json` from position `from`, or -1.
double numberAfter(const std::string &json, const std::string &key, size_t from = 0) {
  size_t at = json.find("\"" + key + "\": ", from);
  if (at == std::string::npos)
    return -1;
  return std::atof(json.c_str() + at + key.size() + 4);
}

/// A field of one collective's counter, or -1.
double collectiveField(const std::string &json, const std::string &name,
                       const std::string &field) {
  size_t at = json.find("\"" + name + "\": {");
  if (at == std::string::npos)
    return -1;
  return numberAfter(json, field, at);
}

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

moert_memref2d memref2(void *p, int64_t rows, int64_t cols) {
  moert_memref2d m{p, p, 0, {rows, cols}, {cols, 1}};
  return m;
}

int64_t maxOverRanks(int64_t v) {
  if (moert_allreduce_i64("bench.max", &v, 1, 1)) {
    std::fprintf(stderr, "allreduce: %s\n", moert_last_error());
    std::exit(1);
  }
  return v;
}
} // namespace

int main(int argc, char **argv) {
  int64_t tokens = 512, hidden = 2048, topK = 8, experts = 128, iters = 20, warmup = 3;
  double computeMs = 0;
  bool printJson = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--tokens")
      tokens = std::atoll(next());
    else if (a == "--hidden")
      hidden = std::atoll(next());
    else if (a == "--topk")
      topK = std::atoll(next());
    else if (a == "--experts")
      experts = std::atoll(next());
    else if (a == "--iters")
      iters = std::atoll(next());
    else if (a == "--warmup")
      warmup = std::atoll(next());
    else if (a == "--compute-ms")
      computeMs = std::atof(next());
    else if (a == "--json")
      printJson = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--tokens N] [--hidden H] [--topk K] [--experts E] "
                   "[--iters N] [--warmup N] [--compute-ms MS] [--json]\n",
                   argv[0]);
      return 2;
    }
  }
  if (moert_init("mpi", 0)) {
    std::fprintf(stderr, "moert_init: %s\n", moert_last_error());
    return 1;
  }
  const int rank = moert_rank(), ranks = moert_size();
  if (experts % ranks || topK > experts) {
    std::fprintf(stderr, "experts must be a multiple of the ranks and >= top-k\n");
    return 2;
  }
  std::vector<float> x(size_t(tokens * hidden)), weights(size_t(tokens * topK));
  std::vector<int32_t> ids(size_t(tokens * topK), -1);
  std::vector<int32_t> expertRank(static_cast<size_t>(experts));
  for (int64_t i = 0; i < tokens * hidden; ++i)
    x[i] = float(int64_t(mix(uint64_t(rank) << 40 | uint64_t(i)) % 2001) - 1000) * 1e-3f;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < topK; ++j) {
      int32_t e;
      uint64_t salt = 0;
      do { // distinct experts per token
        e = int32_t(mix((uint64_t(rank) << 48) ^ (uint64_t(t) << 16) ^ (j << 8) ^ salt++) %
                    uint64_t(experts));
      } while (std::find(&ids[t * topK], &ids[t * topK + j], e) != &ids[t * topK + j]);
      ids[t * topK + j] = e;
      weights[t * topK + j] = 1.0f / float(topK);
    }
  for (int64_t e = 0; e < experts; ++e)
    expertRank[e] = int32_t(e / (experts / ranks));

  int64_t plan[MOERT_DISPATCH_PLAN_FIELDS] = {};
  plan[MOERT_PLAN_CAPACITY] = tokens * ranks;
  plan[MOERT_PLAN_MAX_TOKENS] = tokens;
  plan[MOERT_PLAN_RANKS] = ranks;
  moert_memref2d xm = memref2(x.data(), tokens, hidden);
  moert_memref2d im = memref2(ids.data(), tokens, topK);
  moert_memref2d wm = memref2(weights.data(), tokens, topK);
  moert_memref1d rm{expertRank.data(), expertRank.data(), 0, {experts}, {1}};
  moert_memref1d pm{plan, plan, 0, {MOERT_DISPATCH_PLAN_FIELDS}, {1}};

  std::vector<double> dispatchMs, combineMs, dispatchPayloadMs, combinePayloadMs;
  double dispatchBytes = 0, combineBytes = 0, computeNs = -1, computeMsMeasured = 0;
  std::string json;
  for (int64_t it = 0; it < warmup + iters; ++it) {
    moert_barrier("bench.start");
    moert_counters_reset();
    auto t0 = Clock::now();
    moert_dispatch_result d;
    _mlir_ciface_moert_ep_dispatch_f32(&d, &xm, &im, &wm, &rm, &pm);
    auto t1 = Clock::now();
    if (computeMs > 0) // the experts: a spin, so the rank keeps its core
      while (std::chrono::duration<double, std::milli>(Clock::now() - t1).count() < computeMs) {
      }
    auto t2 = Clock::now();
    moert_memref2d partial = d.x; // [rows, hidden] as received
    moert_memref2d y;
    _mlir_ciface_moert_ep_combine_f32(&y, &partial, d.handle);
    auto t3 = Clock::now();
    json = countersJson();
    std::free(d.x.allocated);
    std::free(d.local_ids.allocated);
    std::free(d.weights.allocated);
    std::free(y.allocated);
    auto ns = [](Clock::duration d) {
      return int64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
    };
    // The slowest rank's view of each step.
    int64_t dNs = maxOverRanks(ns(t1 - t0)), cNs = maxOverRanks(ns(t3 - t2));
    int64_t dpNs = maxOverRanks(
        int64_t(collectiveField(json, "dispatch.payload", "seconds") * 1e9));
    int64_t cpNs = maxOverRanks(
        int64_t(collectiveField(json, "combine.payload", "seconds") * 1e9));
    if (it < warmup)
      continue;
    dispatchMs.push_back(dNs * 1e-6);
    combineMs.push_back(cNs * 1e-6);
    dispatchPayloadMs.push_back(dpNs * 1e-6);
    combinePayloadMs.push_back(cpNs * 1e-6);
    dispatchBytes = collectiveField(json, "dispatch.payload", "bytes_sent");
    combineBytes = collectiveField(json, "combine.payload", "bytes_sent");
    computeNs = numberAfter(json, "compute_ns");
    computeMsMeasured = std::chrono::duration<double, std::milli>(t2 - t1).count();
  }
  if (rank == 0) {
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    auto best = [](const std::vector<double> &v) {
      return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
    };
    std::printf("ep_bench: %d ranks, %ld tokens/rank, H=%ld, top-%ld, %ld experts, f32, "
                "%ld iterations (median; best)\n",
                ranks, long(tokens), long(hidden), long(topK), long(experts), long(iters));
    auto line = [&](const char *what, const std::vector<double> &all,
                    const std::vector<double> &payload, double bytes) {
      double m = median(payload), b = best(payload);
      std::printf("  %-8s entry %8.3f ms (best %8.3f)  payload %8.3f ms (best %8.3f)  "
                  "%.2f MB/rank  %8.1f MB/s (best %8.1f)\n",
                  what, median(all), best(all), m, b, bytes / 1e6,
                  m > 0 ? bytes / 1e6 / (m * 1e-3) : 0.0, b > 0 ? bytes / 1e6 / (b * 1e-3) : 0.0);
    };
    line("dispatch", dispatchMs, dispatchPayloadMs, dispatchBytes);
    line("combine", combineMs, combinePayloadMs, combineBytes);
    if (computeNs >= 0) {
      double transfer = median(dispatchMs) + median(combineMs);
      double compute = computeNs * 1e-6;
      std::printf("  counters: compute_ns %.0f (%.3f ms; spun %.3f ms); dispatch+combine "
                  "%.3f ms = %.1f%% of the layer\n",
                  computeNs, compute, computeMsMeasured, transfer,
                  100.0 * transfer / (transfer + compute));
    } else {
      std::printf("  counters: no compute_ns\n");
    }
    if (printJson)
      std::printf("  rank 0 counters of the last iteration: %s\n", json.c_str());
    std::fflush(stdout);
  }
  moert_finalize();
  return 0;
}
