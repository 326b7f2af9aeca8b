//===- moe-eplb-bench.cpp - DeepSeek's EPLB against ours ------------------===//
//
// moe-eplb-bench DATA_DIR: peak/average per layer of DeepSeek's EPLB and ours
// (even and uneven shares) on every *.json trace of DATA_DIR at EP32, EP64
// and EP144; planning time for 58 layers x 256 experts at EP32; synthetic
// traces whose hot experts drift over windows (plan on the mean, the max,
// mean + std, the worst window); plan on one trace, run on another; and
// batches sampled from one trace run on plans made from another, with the
// replicas fixed by the plan or chosen per batch (balanceBatch).
//
//===----------------------------------------------------------------------===//
#include "moe/EPLB/BatchBalance.h"
#include "moe/EPLB/DeepSeek.h"
#include "moe/EPLB/EvenPacking.h"
#include "moe/EPLB/PlanIO.h"
#include "moe/EPLB/Planner.h"
#include "moe/EPLB/Robust.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <chrono>
#include <map>
#include <random>

using namespace mlir::moe::eplb;

namespace {
struct Config {
  const char *name;
  Topology topology;
};

// EP64 takes 320 slots (5 per device): 288 does not divide over 64 devices.
// DeepSeek-V3's 256 experts fall into 8 groups of 32 (its group-limited
// routing); on one node DeepSeek's EPLB places as without groups, ours
// takes the experts of a group to move together (FuturePacking.h).
const Config kConfigs[] = {
    {"EP32", {288, 32, 1, 8}},
    {"EP64", {320, 64, 1, 8}},
    {"EP144", {288, 144, 1, 8}},
};
const Config kNodeAware = {"EP32/4node", {288, 32, 4, 8}};

struct Trace {
  std::string name;
  std::vector<std::vector<double>> layers; // non-zero layers only
};

bool allZero(const std::vector<double> &row) {
  return std::all_of(row.begin(), row.end(), [](double x) { return x == 0; });
}

/// CPU seconds of this process since `since` (robust to other load on
/// the machine; the planner is single-threaded).
double cpuSeconds(std::clock_t since) {
  return static_cast<double>(std::clock() - since) / CLOCKS_PER_SEC;
}

struct Stats {
  double sum = 0, max = 0;
  int n = 0;
  void add(double x) {
    sum += x;
    max = std::max(max, x);
    ++n;
  }
  double mean() const { return n ? sum / n : 0; }
};

void realTraces(const std::vector<Trace> &traces) {
  std::printf("\n== Real traces (SGLang DeepSeek-V3): peak/avg per layer, mean "
              "and max over layers ==\n");
  std::printf("%-28s %-10s %6s | %-13s | %-13s | %-13s | %-13s | %5s %5s %5s\n",
              "trace", "config", "layers", "deepseek", "ours even",
              "ours shares", "even bound", "worse", "wrsS", "dupDS");
  std::printf("%-28s %-10s %6s | %6s %6s | %6s %6s | %6s %6s | %6s %6s |\n", "",
              "", "", "mean", "max", "mean", "max", "mean", "max", "mean",
              "max");
  std::vector<Config> configs(std::begin(kConfigs), std::end(kConfigs));
  configs.push_back(kNodeAware);
  for (const Trace &trace : traces)
    for (const Config &config : configs) {
      Stats base, even, shares, bound;
      int worse = 0, worseShares = 0, duplicates = 0;
      const Topology &t = config.topology;
      for (const std::vector<double> &load : trace.layers) {
        PlanOptions deepseek;
        deepseek.algorithm = Algorithm::DeepSeek;
        LayerPlan b = planLayer(load, t, deepseek);
        LayerPlan o = planLayer(load, t, PlanOptions());
        PlanOptions withShares;
        withShares.shares = true;
        LayerPlan s = planLayer(load, t, withShares);
        base.add(b.ratio());
        even.add(o.ratio());
        shares.add(s.ratio());
        bound.add(peakLowerBound(load, t, /*shares=*/false) / o.mean);
        worse += o.ratio() > b.ratio() * (1 + 1e-12);
        worseShares += s.ratio() > b.ratio() * (1 + 1e-12);
        duplicates +=
            checkPlacement(b.placement, static_cast<int64_t>(load.size()), t) !=
            "";
      }
      std::printf("%-28s %-10s %6d | %6.4f %6.4f | %6.4f %6.4f | %6.4f %6.4f | "
                  "%6.4f %6.4f | %5d %5d %5d\n",
                  trace.name.c_str(), config.name, base.n, base.mean(),
                  base.max, even.mean(), even.max, shares.mean(), shares.max,
                  bound.mean(), bound.max, worse, worseShares, duplicates);
      std::fflush(stdout);
    }
}

void planningTime(const std::vector<Trace> &traces) {
  std::printf("\n== Planning time, all layers of a trace at EP32 (288 slots, "
              "32 devices), CPU seconds on one core ==\n");
  std::printf("%-28s %6s %12s %12s %12s\n", "trace", "layers", "deepseek [s]",
              "ours even [s]", "ours shares [s]");
  const Topology t = kConfigs[0].topology;
  for (const Trace &trace : traces) {
    double times[3];
    for (int mode = 0; mode < 3; ++mode) {
      PlanOptions options;
      options.algorithm = mode == 0 ? Algorithm::DeepSeek : Algorithm::Ours;
      options.shares = mode == 2;
      std::clock_t start = std::clock();
      for (const std::vector<double> &load : trace.layers)
        planLayer(load, t, options);
      times[mode] = cpuSeconds(start);
    }
    std::printf("%-28s %6zu %12.3f %12.3f %12.3f\n", trace.name.c_str(),
                trace.layers.size(), times[0], times[1], times[2]);
  }
}
/// splitmix64: a fixed, portable random stream.
struct Random {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % n); }
};

/// [layer][window][expert]: Zipf(0.8) loads with +-20% noise; between
/// windows, `drift` of the 32 hottest ranks trade places with random experts.
std::vector<std::vector<std::vector<double>>>
driftingTrace(uint64_t seed, int64_t layers, int64_t windows, int64_t experts,
              int64_t drift) {
  Random rng{seed};
  std::vector<std::vector<std::vector<double>>> out(layers);
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<int64_t> expertOfRank(experts);
    for (int64_t r = 0; r < experts; ++r)
      expertOfRank[r] = r;
    for (int64_t r = experts - 1; r > 0; --r)
      std::swap(expertOfRank[r], expertOfRank[rng.below(r + 1)]);
    for (int64_t w = 0; w < windows; ++w) {
      if (w > 0)
        for (int64_t k = 0; k < drift; ++k)
          std::swap(expertOfRank[rng.below(32)],
                    expertOfRank[rng.below(experts)]);
      std::vector<double> load(experts);
      for (int64_t r = 0; r < experts; ++r)
        load[expertOfRank[r]] =
            std::round(1e6 / std::pow(1.0 + r, 0.8) * (0.8 + 0.4 * rng.unit()));
      out[l].push_back(std::move(load));
    }
  }
  return out;
}

void drifting() {
  const int64_t layers = 16, windows = 8, experts = 256, drift = 4;
  std::printf("\n== Synthetic drifting traces (seed 42, %lld layers x %lld "
              "windows x %lld experts, Zipf 0.8, %lld hot ranks move per "
              "window), EP32 ==\n",
              (long long)layers, (long long)windows, (long long)experts,
              (long long)drift);
  std::printf("peak/avg per window, mean over layers of the window mean and "
              "of the worst window\n");
  std::printf("%-36s %12s %12s\n", "plan", "mean window", "worst window");
  auto trace = driftingTrace(42, layers, windows, experts, drift);
  // No groups: the synthetic hot experts move alone.
  const Topology t{288, 32, 1, 1};
  struct Row {
    const char *name;
    Algorithm algorithm;
    bool shares;
    int kind; // a Robust; kStale: window 0 only; kReplanned: every window replanned
  };
  constexpr int kStale = -1, kReplanned = -2;
  const Row rows[] = {
      {"deepseek, window 0 (stale)", Algorithm::DeepSeek, false, kStale},
      {"deepseek, mean of windows", Algorithm::DeepSeek, false, int(Robust::Mean)},
      {"ours, window 0 (stale)", Algorithm::Ours, false, kStale},
      {"ours, mean of windows", Algorithm::Ours, false, int(Robust::Mean)},
      {"ours, max of windows", Algorithm::Ours, false, int(Robust::Max)},
      {"ours, mean + 1 std", Algorithm::Ours, false, int(Robust::MeanStd)},
      {"ours, next window (default)", Algorithm::Ours, false, int(Robust::Next)},
      {"ours, worst window", Algorithm::Ours, false, int(Robust::Worst)},
      {"ours shares, worst window", Algorithm::Ours, true, int(Robust::Worst)},
      {"ours, replanned every window", Algorithm::Ours, false, kReplanned},
  };
  for (const Row &row : rows) {
    PlanOptions options;
    options.algorithm = row.algorithm;
    options.shares = row.shares;
    Stats meanWindow, worstWindow;
    for (const auto &loads : trace) {
      std::vector<double> ratios;
      if (row.kind == kReplanned) {
        for (const std::vector<double> &w : loads)
          ratios.push_back(planLayer(w, t, options).ratio());
      } else {
        LayerPlan plan = row.kind == kStale
                             ? planLayer(loads[0], t, options)
                             : planWindows(loads, t, options,
                                           static_cast<Robust>(row.kind), 1.0);
        ratios = windowRatios(plan.placement, loads, t.devices);
      }
      double sum = 0;
      for (double r : ratios)
        sum += r;
      meanWindow.add(sum / static_cast<double>(ratios.size()));
      worstWindow.add(*std::max_element(ratios.begin(), ratios.end()));
    }
    std::printf("%-36s %12.4f %12.4f\n", row.name, meanWindow.mean(),
                worstWindow.mean());
  }
}

void crossTrace(const std::vector<Trace> &traces) {
  std::printf("\n== Plan on trace A, run on trace B (EP32): mean peak/avg over "
              "layers, deepseek / ours ==\n");
  std::printf("%-24s", "plan on \\ run on");
  for (const Trace &b : traces)
    std::printf(" %22s", b.name.c_str());
  std::printf("\n");
  const Topology t = kConfigs[0].topology;
  PlanOptions deepseek;
  deepseek.algorithm = Algorithm::DeepSeek;
  for (const Trace &a : traces) {
    std::vector<Placement> ours, theirs;
    for (const std::vector<double> &load : a.layers) {
      ours.push_back(planLayer(load, t, PlanOptions()).placement);
      theirs.push_back(planLayer(load, t, deepseek).placement);
    }
    std::printf("%-24s", a.name.c_str());
    for (const Trace &b : traces) {
      Stats o, d;
      for (size_t l = 0; l < std::min(a.layers.size(), b.layers.size()); ++l) {
        o.add(peakOverAverage(ours[l], b.layers[l], t.devices));
        d.add(peakOverAverage(theirs[l], b.layers[l], t.devices));
      }
      std::printf("        %6.4f / %6.4f", d.mean(), o.mean());
    }
    std::printf("\n");
  }
}

/// Batches of a trace: each token draws kTopK distinct experts with
/// probabilities proportional to the trace's counts. A batch's count of an
/// expert is then Binomial(tokens, pi_e), pi_e the chance that a token draws
/// e, estimated once per layer from kProbeTokens simulated tokens (the
/// counts of different experts are drawn independently: the one correlation
/// left out is that a token's k experts are distinct).
constexpr int kTopK = 8;
constexpr int kProbeTokens = 20000;
constexpr int kBatchesPerLayer = 8;

std::vector<double> inclusionProbabilities(const std::vector<double> &load,
                                           std::mt19937_64 &rng) {
  std::vector<double> cumulative(load.size());
  double total = 0;
  for (size_t e = 0; e < load.size(); ++e)
    cumulative[e] = total += load[e];
  std::vector<double> hits(load.size(), 0.0);
  std::uniform_real_distribution<double> uniform(0.0, total);
  int64_t positive = std::count_if(load.begin(), load.end(), [](double w) { return w > 0; });
  const int draws = static_cast<int>(std::min<int64_t>(kTopK, positive));
  std::vector<size_t> chosen;
  for (int t = 0; t < kProbeTokens; ++t) {
    chosen.clear();
    while (static_cast<int>(chosen.size()) < draws) {
      size_t e = std::upper_bound(cumulative.begin(), cumulative.end(), uniform(rng)) -
                 cumulative.begin();
      e = std::min(e, load.size() - 1);
      if (load[e] > 0 && std::find(chosen.begin(), chosen.end(), e) == chosen.end())
        chosen.push_back(e);
    }
    for (size_t e : chosen)
      hits[e] += 1;
  }
  for (double &h : hits)
    h /= kProbeTokens;
  return hits;
}

std::vector<double> sampleBatch(const std::vector<double> &probability, int64_t tokens,
                                std::mt19937_64 &rng) {
  std::vector<double> counts(probability.size());
  for (size_t e = 0; e < probability.size(); ++e)
    counts[e] = static_cast<double>(
        std::binomial_distribution<int64_t>(tokens, probability[e])(rng));
  return counts;
}

/// Per-batch peak/avg of one way of running batches, over all pairs.
struct BatchStats {
  std::vector<double> pairMeans, pairP99;
  void addPair(std::vector<double> ratios) {
    double sum = 0;
    for (double r : ratios)
      sum += r;
    pairMeans.push_back(sum / static_cast<double>(ratios.size()));
    size_t at = std::min(ratios.size() - 1, static_cast<size_t>(0.99 * ratios.size()));
    std::nth_element(ratios.begin(), ratios.begin() + at, ratios.end());
    pairP99.push_back(ratios[at]);
  }
  static double mean(const std::vector<double> &v) {
    double sum = 0;
    for (double x : v)
      sum += x;
    return v.empty() ? 0 : sum / static_cast<double>(v.size());
  }
};

/// A trace whose layers are the sum of `traces` but `skip`, each normalised
/// to the same total per layer (leave-one-out planning).
Trace sumOfOthers(const std::vector<Trace> &traces, size_t skip) {
  Trace sum;
  sum.name = "all but " + traces[skip].name;
  size_t layers = traces[0].layers.size();
  for (const Trace &t : traces)
    layers = std::min(layers, t.layers.size());
  for (size_t l = 0; l < layers; ++l) {
    std::vector<double> row(traces[0].layers[l].size(), 0.0);
    for (size_t i = 0; i < traces.size(); ++i) {
      if (i == skip)
        continue;
      double total = 0;
      for (double w : traces[i].layers[l])
        total += w;
      for (size_t e = 0; e < row.size() && total > 0; ++e)
        row[e] += traces[i].layers[l][e] / total * 1e6;
    }
    sum.layers.push_back(row);
  }
  return sum;
}

/// Static plans out of sample (issue 13, item 1): plan every layer on trace
/// A, run trace B's loads (all ordered pairs), and leave-one-out (plan on
/// the sum of the other traces, or on them as windows, run the one left
/// out). Per way of planning: the mean over pairs of the mean peak/avg over
/// layers, its difference from DeepSeek's, the pairs where it is worse than
/// DeepSeek's and by how much at most, and the mean in-sample peak/avg. The
/// last row compares the default with itself at tauScale 0.51 instead of
/// DeepSeek: how far a pair moves when one constant is nudged by 2%.
void outOfSample(const std::vector<Trace> &traces) {
  const Config configs[] = {{"EP32", {288, 32, 1, 8}},
                            {"EP64", {320, 64, 1, 8}},
                            {"EP72", {288, 72, 1, 8}},
                            {"EP144", {288, 144, 1, 8}}};
  // `windows`: leave-one-out plans take the other traces as windows
  // (--robust=next) instead of their sum.
  // `noGroups`: plan as if the experts had no groups.
  // `against`: the way its columns are relative to (0: deepseek).
  struct Way {
    const char *name;
    PlanOptions options;
    bool windows = false;
    bool noGroups = false;
    size_t against = 0;
  };
  Way ways[] = {{"deepseek", {}},
                {"ours, objective sample", {}},
                {"ours, objective future (default)", {}},
                {"ours, future, groups not given", {}, false, true},
                {"deepseek, loo for windows' m+0.5s", {}, true},
                {"ours, loo on windows, robust=next", {}, true},
                {"noise: tauScale 0.51 vs default", {}, false, false, 2}};
  ways[0].options.algorithm = Algorithm::DeepSeek;
  ways[1].options.objective = Objective::Sample;
  ways[4].options.algorithm = Algorithm::DeepSeek;
  ways[6].options.future.tauScale = 0.51;
  size_t n = traces.size();
  std::printf("\n== Static plans out of sample: plan on trace A, run trace B "
              "(%zu ordered pairs), and leave-one-out (plan on the sum of the "
              "other %zu, or on them as windows, run the one left out) ==\n",
              n * (n - 1), n - 1);
  std::printf("mean over pairs of the mean peak/avg over layers; vs ds = "
              "relative to deepseek's; worse = pairs where it is above "
              "deepseek's, by at most 'worst'; the noise row: the same against "
              "the default\n");
  std::vector<Trace> others;
  for (size_t i = 0; i < n; ++i)
    others.push_back(sumOfOthers(traces, i));
  for (const Config &config : configs) {
    const Topology &t = config.topology;
    auto meanRatio = [&](const std::vector<Placement> &plan, const Trace &run) {
      Stats ratio;
      for (size_t l = 0; l < std::min(plan.size(), run.layers.size()); ++l)
        ratio.add(peakOverAverage(plan[l], run.layers[l], t.devices));
      return ratio.mean();
    };
    std::printf("%s/%lld:\n%-34s %8s %8s %9s %8s | %8s %8s %8s %8s | %9s\n",
                config.name, (long long)t.slots, "", "pairs", "vs ds", "worse",
                "worst", "loo", "vs ds", "worse", "worst", "in-sample");
    std::vector<std::vector<double>> allPairs, allLoo;
    for (const Way &way : ways) {
      Topology planT = t;
      if (way.noGroups)
        planT.groups = 1;
      auto plan = [&](const Trace &trace) {
        std::vector<Placement> out;
        for (const std::vector<double> &load : trace.layers)
          out.push_back(planLayer(load, planT, way.options).placement);
        return out;
      };
      std::vector<double> pairs, loo;
      Stats inSample;
      for (size_t a = 0; a < n; ++a) {
        std::vector<Placement> planned = plan(traces[a]);
        inSample.add(meanRatio(planned, traces[a]));
        for (size_t b = 0; b < n; ++b)
          if (b != a)
            pairs.push_back(meanRatio(planned, traces[b]));
        if (!way.windows) {
          loo.push_back(meanRatio(plan(others[a]), traces[a]));
          continue;
        }
        std::vector<Placement> fromWindows;
        for (size_t l = 0; l < traces[a].layers.size(); ++l) {
          std::vector<std::vector<double>> windows;
          for (size_t i = 0; i < n; ++i)
            if (i != a && l < traces[i].layers.size())
              windows.push_back(traces[i].layers[l]);
          fromWindows.push_back(
              planWindows(windows, planT, way.options, Robust::Next, 0).placement);
        }
        loo.push_back(meanRatio(fromWindows, traces[a]));
      }
      allPairs.push_back(pairs);
      allLoo.push_back(loo);
      auto summary = [](const std::vector<double> &x,
                        const std::vector<double> &ds) {
        double mean = 0, dsMean = 0, worst = 0;
        int worse = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          mean += x[i] / x.size();
          dsMean += ds[i] / x.size();
          worst = std::max(worst, x[i] - ds[i]);
          worse += x[i] > ds[i] * (1 + 1e-12);
        }
        std::printf(" %8.4f %+7.2f%% %4d/%-4zu %+8.4f", mean,
                    100 * (mean / dsMean - 1), worse, x.size(), worst);
      };
      std::printf("%-34s", way.name);
      summary(pairs, allPairs[way.against]);
      std::printf(" |");
      summary(loo, allLoo[way.against]);
      std::printf(" | %9.4f\n", inSample.mean());
      std::fflush(stdout);
    }
  }
}

void batches(const std::vector<Trace> &traces) {
  const Config configs[] = {{"EP32", {288, 32, 1, 8}},
                            {"EP64", {320, 64, 1, 8}},
                            {"EP72", {288, 72, 1, 8}},
                            {"EP144", {288, 144, 1, 8}}};
  const int64_t batchTokens[] = {16, 128, 1024};
  const char *ways[] = {"deepseek, replica by token index", "ours even", "ours shares",
                        "deepseek + per-batch selection", "ours shares + per-batch selection",
                        "ours even + per-batch selection"};
  constexpr int kWays = 6;
  // The placement each per-batch way selects replicas on.
  const int selectOn[kWays] = {-1, -1, -1, 0, 2, 1};
  std::printf("\n== Batches: plan on trace A, run batches of B tokens per rank sampled from "
              "trace B (top-%d, %d batches per layer); 12 ordered pairs and 4 "
              "leave-one-out (plan on the sum of the other three) ==\n",
              kTopK, kBatchesPerLayer);
  std::printf("per-batch peak/avg: mean over pairs of the mean and of the p99 over "
              "layers x batches; 'closer' = (deepseek - 1 - (x - 1)) / (deepseek - 1), "
              "worst pair\n");
  // Runs: (plan trace, run trace).
  std::vector<std::pair<Trace, const Trace *>> runs;
  for (size_t a = 0; a < traces.size(); ++a)
    for (size_t b = 0; b < traces.size(); ++b)
      if (a != b)
        runs.push_back({traces[a], &traces[b]});
  for (size_t b = 0; b < traces.size(); ++b)
    runs.push_back({sumOfOthers(traces, b), &traces[b]});
  std::map<std::string, std::vector<std::vector<double>>> probability;
  std::mt19937_64 probe(7);
  for (const Trace &t : traces)
    for (const std::vector<double> &load : t.layers)
      probability[t.name].push_back(inclusionProbabilities(load, probe));

  for (const Config &config : configs) {
    double selectSeconds = 0;
    int64_t selections = 0;
    const Topology &t = config.topology;
    PlanOptions deepseek, even, shares;
    deepseek.algorithm = Algorithm::DeepSeek;
    shares.shares = true;
    // [B][way] over pairs.
    std::vector<std::vector<BatchStats>> stats(3, std::vector<BatchStats>(kWays));
    for (size_t run = 0; run < runs.size(); ++run) {
      const Trace &plan = runs[run].first;
      const Trace &live = *runs[run].second;
      size_t layers = std::min(plan.layers.size(), live.layers.size());
      std::vector<Placement> placements[3];
      for (size_t l = 0; l < layers; ++l) {
        placements[0].push_back(planLayer(plan.layers[l], t, deepseek).placement);
        placements[1].push_back(planLayer(plan.layers[l], t, even).placement);
        placements[2].push_back(planLayer(plan.layers[l], t, shares).placement);
      }
      for (int bi = 0; bi < 3; ++bi) {
        std::mt19937_64 rng(1000 * run + bi);
        std::vector<std::vector<double>> ratios(kWays);
        for (size_t l = 0; l < layers; ++l)
          for (int k = 0; k < kBatchesPerLayer; ++k) {
            std::vector<double> counts =
                sampleBatch(probability[live.name][l], batchTokens[bi] * t.devices, rng);
            double total = 0;
            for (double c : counts)
              total += c;
            for (int w = 0; w < 3; ++w)
              ratios[w].push_back(peakOverAverage(placements[w][l], counts, t.devices));
            for (int w = 3; w < kWays; ++w) {
              auto started = std::chrono::steady_clock::now();
              double peak = balanceBatch(placements[selectOn[w]][l], counts, t.devices);
              selectSeconds += std::chrono::duration<double>(
                                   std::chrono::steady_clock::now() - started)
                                   .count();
              ++selections;
              ratios[w].push_back(ratioToMean(peak, total, t.devices));
            }
          }
        for (int w = 0; w < kWays; ++w)
          stats[bi][w].addPair(ratios[w]);
      }
    }
    for (int bi = 0; bi < 3; ++bi) {
      std::printf("%s/%lld, B = %lld tokens per rank:\n", config.name,
                  static_cast<long long>(t.slots), static_cast<long long>(batchTokens[bi]));
      std::printf("  %-36s %8s %8s %8s %8s\n", "", "mean", "p99", "worst", "closer");
      const BatchStats &ds = stats[bi][0];
      for (int w = 0; w < kWays; ++w) {
        const BatchStats &s = stats[bi][w];
        double worstCloser = 1e9;
        for (size_t p = 0; p < s.pairMeans.size(); ++p)
          worstCloser = std::min(worstCloser, (ds.pairMeans[p] - s.pairMeans[p]) /
                                                  (ds.pairMeans[p] - 1));
        double worst = *std::max_element(s.pairMeans.begin(), s.pairMeans.end());
        std::printf("  %-36s %8.4f %8.4f %8.4f %7.1f%%\n", ways[w], BatchStats::mean(s.pairMeans),
                    BatchStats::mean(s.pairP99), worst, 100 * worstCloser);
      }
    }
    std::printf("%s per-batch selection: %.1f us per layer and batch (mean of %lld, "
                "three placements)\n",
                config.name, 1e6 * selectSeconds / static_cast<double>(selections),
                static_cast<long long>(selections));
    std::fflush(stdout);
  }
}
} // namespace

int main(int argc, char **argv) {
  if (argc != 2 && !(argc == 3 && std::string(argv[2]) == "out-of-sample")) {
    llvm::errs() << "usage: moe-eplb-bench DATA_DIR [out-of-sample] (DATA_DIR: "
                    "the folder of {\"logical_count\": ...} traces)\n";
    return 2;
  }
  std::vector<std::string> files;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(argv[1], ec), end; it != end && !ec;
       it.increment(ec))
    if (llvm::sys::path::extension(it->path()) == ".json")
      files.push_back(it->path());
  if (ec || files.empty()) {
    llvm::errs() << "moe-eplb-bench: error: " << argv[1]
                 << ": no .json traces found\n";
    return 1;
  }
  std::sort(files.begin(), files.end());
  std::vector<Trace> traces;
  for (const std::string &file : files) {
    llvm::Expected<LoadTrace> loaded = readLoadTrace(file);
    if (!loaded) {
      llvm::errs() << "moe-eplb-bench: error: "
                   << llvm::toString(loaded.takeError()) << "\n";
      return 1;
    }
    Trace trace;
    trace.name = llvm::sys::path::stem(file).str();
    if (trace.name.rfind("sglang_dsv3_", 0) == 0)
      trace.name = trace.name.substr(12);
    for (const std::vector<double> &row : loaded->windows[0])
      if (!allZero(row))
        trace.layers.push_back(row);
    traces.push_back(std::move(trace));
  }
  // A third argument runs one section: out-of-sample.
  if (argc == 3 && std::string(argv[2]) == "out-of-sample") {
    outOfSample(traces);
    return 0;
  }
  planningTime(traces);
  realTraces(traces);
  crossTrace(traces);
  outOfSample(traces);
  drifting();
  batches(traces);
  return 0;
}
